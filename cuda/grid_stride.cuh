// Launch shape of the optimizers' element-wise kernels (cuda/lion.cu, adan.cu, mars.cu, muon.cu): 256 threads a
// block, one element per thread, and a grid-stride loop past 2^20 blocks. Each element is computed by one thread
// alone, so the launch shape never changes a result.
#pragma once

#include <cstdint>

#include "cuda/bf16.cuh"

namespace nb::cuda {

constexpr unsigned kElementwiseThreads = 256;

inline unsigned elementwise_blocks(int64_t n) {
    const unsigned blocks = blocks_for(n, kElementwiseThreads);
    return blocks < (1u << 20) ? blocks : (1u << 20);
}

__device__ __forceinline__ int64_t first_element() {
    return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t element_stride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

}  // namespace nb::cuda

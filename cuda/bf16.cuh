// bf16 helpers shared by the kernels: loads that widen to f32 and stores that round to nearest even.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace nb::cuda {

using bf16 = __nv_bfloat16;

__device__ __forceinline__ float to_f32(bf16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ bf16 to_bf16(float x) { return __float2bfloat16_rn(x); }

// Element type of an activation-dtype tensor on this backend.
template <class T>
__device__ __forceinline__ void store(T* p, float x);
template <>
__device__ __forceinline__ void store<float>(float* p, float x) { *p = x; }
template <>
__device__ __forceinline__ void store<bf16>(bf16* p, float x) { *p = to_bf16(x); }

inline unsigned blocks_for(int64_t n, unsigned threads) {
    return static_cast<unsigned>((n + threads - 1) / threads);
}

}  // namespace nb::cuda

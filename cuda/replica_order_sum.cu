// sum_in_order_async (cuda/replica_order_sum.h). One thread per element (a grid-stride loop), which adds the
// parts in their order: the launch shape never changes a bit. Up to kPartsPerLaunch parts a launch, the running
// sum kept in `sum` between launches (an f32 store and load change no bit).
#include "cuda/replica_order_sum.h"

#include <algorithm>

#include "cuda/cuda_check.h"
#include "cuda/grid_stride.cuh"

namespace nb::cuda {

namespace {

constexpr int kPartsPerLaunch = 8;

struct Parts {
    const float* at[kPartsPerLaunch];
    int count;
};

// first: sum starts at 0 (+0.0f, as the CPU's sum does); else at what the previous launch left.
__global__ void add_parts(float* sum, Parts parts, bool first, int64_t n) {
    for (int64_t i = first_element(); i < n; i += element_stride()) {
        float s = first ? 0.0f : sum[i];
        for (int p = 0; p < parts.count; ++p) s = __fadd_rn(s, parts.at[p][i]);
        sum[i] = s;
    }
}

}  // namespace

void sum_in_order_async(float* sum, const std::vector<const float*>& parts, int64_t n, cudaStream_t stream) {
    if (n == 0) return;
    if (parts.empty()) {
        CUDA_CHECK(cudaMemsetAsync(sum, 0, static_cast<size_t>(n) * sizeof(float), stream));
        return;
    }
    for (size_t begin = 0; begin < parts.size(); begin += kPartsPerLaunch) {
        Parts launch{};
        launch.count = static_cast<int>(std::min(parts.size() - begin, static_cast<size_t>(kPartsPerLaunch)));
        for (int p = 0; p < launch.count; ++p) launch.at[p] = parts[begin + static_cast<size_t>(p)];
        add_parts<<<elementwise_blocks(n), kElementwiseThreads, 0, stream>>>(sum, launch, begin == 0, n);
        CUDA_CHECK_LAUNCH();
    }
}

}  // namespace nb::cuda

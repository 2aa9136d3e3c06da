// The expert bias of aux-loss-free balancing (DeepSeek-V3) on the CUDA backend: the loads a step gathers and the
// bias's update from them (the reference is src/cpu/moe_expert_bias.cpp).
//
//   load_e   += offsets[e+1] - offsets[e]        once per microbatch, in f32: exact integers up to 2^24 pairs
//   mean_load = (load_0 + ... + load_{E-1}) / E      the sum in double, in expert order (one thread: E is small)
//   b_i      += rate * sign(mean_load - load_i)      sign(0) = 0; rate * sign is exactly 0 or +-rate, so each
//                                                    b_i is rounded once to f32, as on the CPU: the same bits
// expert_bias, expert_load: f32 [E] on the GPU; expert_offsets i32 [E+1].
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/bf16.cuh"
#include "cuda/context.h"
#include "cuda/cuda_check.h"
#include "cuda/cuda_ops.h"
#include "cuda/describe.h"
#include "src/ops/layer_checks.h"

namespace nb::cuda {

namespace {

constexpr unsigned kThreads = 256;

// One block: thread 0 sums the loads into shared memory; after the barrier every thread updates its experts.
__global__ void expert_bias_update_kernel(float* bias, const float* load, int64_t experts, float rate) {
    __shared__ double mean;
    if (threadIdx.x == 0) {
        double total = 0.0;
        for (int64_t i = 0; i < experts; ++i) total += load[i];
        mean = total / static_cast<double>(experts);
    }
    __syncthreads();
    for (int64_t i = threadIdx.x; i < experts; i += kThreads) {
        const float sign = mean > load[i] ? 1.0f : mean < load[i] ? -1.0f : 0.0f;
        if (sign != 0.0f) bias[i] += rate * sign;  // as the CPU: a tie leaves the bits alone (even a -0)
    }
}

// One thread per expert: its pairs of this microbatch, added to the step's load (no two threads share an entry).
__global__ void expert_load_accumulate_kernel(float* load, const int32_t* offsets, int64_t experts) {
    const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (e < experts) load[e] += static_cast<float>(offsets[e + 1] - offsets[e]);
}

}  // namespace

void CudaOps::moe_expert_load_accumulate(Tensor& expert_load, const Tensor& expert_offsets) {
    const OpTimer timer(*this, "moe_expert_load_accumulate");
    const int64_t experts = check_moe_expert_load_accumulate(expert_load, expert_offsets);
    require_cuda("moe_expert_load_accumulate", "expert_load", expert_load, DType::f32);
    require_cuda("moe_expert_load_accumulate", "expert_offsets", expert_offsets, DType::i32);
    const unsigned blocks = static_cast<unsigned>((experts + kThreads - 1) / kThreads);
    expert_load_accumulate_kernel<<<blocks, kThreads, 0, context().stream>>>(
        static_cast<float*>(expert_load.data()), static_cast<const int32_t*>(expert_offsets.data()), experts);
    CUDA_CHECK_LAUNCH();
}

void CudaOps::moe_expert_bias_update(Tensor& expert_bias, const Tensor& expert_load, float rate) {
    const OpTimer timer(*this, "moe_expert_bias_update");
    const int64_t experts = check_moe_expert_bias_update(expert_bias, expert_load);
    require_cuda("moe_expert_bias_update", "expert_bias", expert_bias, DType::f32);
    require_cuda("moe_expert_bias_update", "expert_load", expert_load, DType::f32);
    expert_bias_update_kernel<<<1, kThreads, 0, context().stream>>>(
        static_cast<float*>(expert_bias.data()), static_cast<const float*>(expert_load.data()), experts, rate);
    CUDA_CHECK_LAUNCH();
}

}  // namespace nb::cuda

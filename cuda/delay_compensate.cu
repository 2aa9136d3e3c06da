// DC-ASGD's delay compensation (--delay-fix taylor), the CPU's arithmetic (src/cpu/delay_compensate.cpp) with
// explicitly rounded intrinsics so that nothing is contracted:
//   grad[i] += ((lambda * grad[i]) * grad[i]) * (w[i] - float(stale[i]))
// grad and w are f32; stale is the compute copy the gradient was computed with (bf16, widened exactly).
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "cuda/bf16.cuh"
#include "cuda/context.h"
#include "cuda/cuda_check.h"
#include "cuda/cuda_ops.h"

namespace nb::cuda {

namespace {

template <typename Stale>
__global__ void delay_compensate_kernel(float* __restrict__ g, const float* __restrict__ w,
                                        const Stale* __restrict__ stale, float lambda, int64_t n) {
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float gi = g[i];
        const float diff = __fsub_rn(w[i], to_f32(stale[i]));
        g[i] = __fadd_rn(gi, __fmul_rn(__fmul_rn(__fmul_rn(lambda, gi), gi), diff));
    }
}

}  // namespace

void CudaOps::delay_compensate(Tensor& grad, const Tensor& w, const Tensor& stale, float lambda) {
    const OpTimer timer(*this, "delay_compensate");
    if (w.numel() != grad.numel() || stale.numel() != grad.numel() || grad.dtype() != DType::f32 ||
        w.dtype() != DType::f32 || stale.dtype() == DType::i32)
        throw std::invalid_argument("delay_compensate: grad " + shape_string(grad.shape()) + " and w " +
                                    shape_string(w.shape()) + " (f32) and stale " + shape_string(stale.shape()) +
                                    " must have one element count");
    const int64_t n = grad.numel();
    if (n == 0) return;
    constexpr unsigned kThreads = 256;
    unsigned blocks = blocks_for(n, kThreads);
    if (blocks > (1u << 20)) blocks = 1u << 20;
    CudaContext& ctx = context();
    float* g = static_cast<float*>(grad.data());
    const float* wp = static_cast<const float*>(w.data());
    if (stale.dtype() == DType::f32)
        delay_compensate_kernel<<<blocks, kThreads, 0, ctx.stream>>>(g, wp, static_cast<const float*>(stale.data()),
                                                                     lambda, n);
    else
        delay_compensate_kernel<<<blocks, kThreads, 0, ctx.stream>>>(g, wp, static_cast<const bf16*>(stale.data()),
                                                                     lambda, n);
    CUDA_CHECK_LAUNCH();
}

}  // namespace nb::cuda

// One AdamW step on f32 tensors, the same arithmetic as the CPU reference (src/cpu/adamw.cpp, which matches
// torch.optim.AdamW's single-tensor path bit for bit):
//
//   p = p * decay                                  decay = f32(1 - lr*wd)
//   m = fma(1-b1, g, m * b1)                       one rounding for the add (torch's fused add_ with alpha)
//   v = fma((1-b2) * g, g, v * b2)                 likewise for addcmul_
//   denom = sqrt(v) / f32(sqrt(1 - b2^t)) + eps    true IEEE sqrt and division
//   p = p + (f32(-lr / (1 - b1^t)) * m) / denom
//
// The scalars are computed on the host in double and rounded to float exactly as the CPU does (same code,
// same libm). On the device every operation uses an explicitly rounded intrinsic (__fmul_rn, __fadd_rn,
// __fmaf_rn, __fsqrt_rn, __fdiv_rn), so nvcc cannot contract or approximate anything: each element's result
// is the CPU's bit for bit (the test allows a few ulps only as a margin). The per-element arithmetic lives in
// cuda/adamw_step.cuh, shared with the fused multi-tensor kernel (cuda/adamw_multi.cu).
#include <cuda_runtime.h>

#include <cmath>
#include <stdexcept>
#include <string>

#include "src/ops/adamw_scalars.h"
#include "cuda/adamw_step.cuh"
#include "cuda/bf16.cuh"
#include "cuda/context.h"
#include "cuda/cuda_check.h"
#include "cuda/cuda_ops.h"
#include "src/ops/optimizer_checks.h"

namespace nb::cuda {

namespace {

__global__ void adamw_kernel(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ m,
                             float* __restrict__ v, int64_t n, AdamWScalars s) {
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
        adamw_step(p, g, m, v, i, s);
}

}  // namespace

void CudaOps::adamw_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, float lr, float beta1,
                           float beta2, float eps, float weight_decay, int64_t step) {
    const OpTimer timer(*this, "adamw_update");
    check_optimizer_tensors("adamw_update", Device::cuda, {{"param", &param}, {"grad", &grad}, {"m", &m}, {"v", &v}});
    check_adamw_step("adamw_update", step);
    const int64_t n = param.numel();
    if (n == 0) return;
    const AdamWScalars s = adamw_scalars(lr, beta1, beta2, eps, weight_decay, step);
    constexpr unsigned kThreads = 256;
    unsigned blocks = blocks_for(n, kThreads);
    if (blocks > (1u << 20)) blocks = 1u << 20;  // grid-stride beyond
    CudaContext& ctx = context();
    adamw_kernel<<<blocks, kThreads, 0, ctx.stream>>>(static_cast<float*>(param.data()),
                                                      static_cast<const float*>(grad.data()),
                                                      static_cast<float*>(m.data()), static_cast<float*>(v.data()),
                                                      n, s);
    CUDA_CHECK_LAUNCH();
}

}  // namespace nb::cuda

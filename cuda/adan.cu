// Adan's update on the device, the CPU's arithmetic (src/cpu/adan.cpp) with explicitly rounded intrinsics so that
// nothing is contracted (the CPU is built with -ffp-contract=off: every multiply and add rounds on its own):
//   diff = first_step ? 0 : g - prev
//   m = m*b1 + (1-b1)*g ;  m_diff = m_diff*b2 + (1-b2)*diff ;  u = g + b2*diff ;  n = n*b3 + ((1-b3)*u)*u
//   denom = sqrt(n) / bc3_sqrt + eps
//   p = p - (step_size*m) / denom ;  p = p - (step_size_diff*m_diff) / denom ;  p = p / shrink ;  prev = g
// The scalars are the host's (adan_scalars, src/ops/optimizer_scalars.h), the same bits as the CPU's.
#include <cuda_runtime.h>

#include "cuda/context.h"
#include "cuda/cuda_check.h"
#include "cuda/cuda_ops.h"
#include "cuda/grid_stride.cuh"
#include "src/ops/optimizer_checks.h"

namespace nb::cuda {

namespace {

__global__ void adan_kernel(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ m,
                            float* __restrict__ m_diff, float* __restrict__ n, float* __restrict__ prev,
                            int64_t count, Ops::AdanScalars s) {
    for (int64_t i = first_element(); i < count; i += element_stride()) {
        const float gi = g[i];
        const float diff = s.first_step ? 0.0f : __fsub_rn(gi, prev[i]);
        const float mi = __fadd_rn(__fmul_rn(m[i], s.beta1), __fmul_rn(s.one_minus_beta1, gi));
        const float di = __fadd_rn(__fmul_rn(m_diff[i], s.beta2), __fmul_rn(s.one_minus_beta2, diff));
        const float u = __fadd_rn(gi, __fmul_rn(s.beta2, diff));
        const float ni = __fadd_rn(__fmul_rn(n[i], s.beta3), __fmul_rn(__fmul_rn(s.one_minus_beta3, u), u));
        const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(ni), s.bc3_sqrt), s.eps);
        float pi = __fsub_rn(p[i], __fdiv_rn(__fmul_rn(s.step_size, mi), denom));
        pi = __fsub_rn(pi, __fdiv_rn(__fmul_rn(s.step_size_diff, di), denom));
        p[i] = __fdiv_rn(pi, s.shrink);
        m[i] = mi;
        m_diff[i] = di;
        n[i] = ni;
        prev[i] = gi;
    }
}

}  // namespace

void CudaOps::adan_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& m_diff, Tensor& n, Tensor& prev_grad,
                          const AdanScalars& s) {
    const OpTimer timer(*this, "adan_update");
    check_optimizer_tensors("adan_update", Device::cuda,
                            {{"param", &param}, {"grad", &grad}, {"m", &m}, {"m_diff", &m_diff}, {"n", &n},
                             {"prev_grad", &prev_grad}});
    const int64_t count = param.numel();
    if (count == 0) return;
    adan_kernel<<<elementwise_blocks(count), kElementwiseThreads, 0, context().stream>>>(
        static_cast<float*>(param.data()), static_cast<const float*>(grad.data()), static_cast<float*>(m.data()),
        static_cast<float*>(m_diff.data()), static_cast<float*>(n.data()), static_cast<float*>(prev_grad.data()),
        count, s);
    CUDA_CHECK_LAUNCH();
}

}  // namespace nb::cuda

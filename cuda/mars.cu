// MARS-AdamW's two kernels on the device, the CPU's arithmetic (src/cpu/mars.cpp) with explicitly rounded
// intrinsics so that nothing is contracted:
//   mars_correction:  c = (g - last)*scale + g
//   mars_update:      c' = c_norm > 1 ? f32(double(c) / c_norm) : c        (a double division, as on the CPU)
//                     m = m*b1 + (1-b1)*c' ;  v = v*b2 + ((1-b2)*c')*c'
//                     denom = (sqrt(v)*inv_bc2_sqrt + eps)*bc1 ;  p = p + neg_lr*(p*wd + m/denom) ;  last = g
// Given the same c_norm, both kernels are the CPU's bit for bit. c_norm itself comes from sum_squares, whose
// CUDA reduction adds in another order than the CPU's (cuda/elementwise.cu): it can differ in the last bits of
// the double, and then c' (when c_norm > 1) can differ by an ulp.
#include <cuda_runtime.h>

#include "cuda/context.h"
#include "cuda/cuda_check.h"
#include "cuda/cuda_ops.h"
#include "cuda/grid_stride.cuh"
#include "src/ops/optimizer_checks.h"

namespace nb::cuda {

namespace {

__global__ void mars_correction_kernel(float* __restrict__ c, const float* __restrict__ g,
                                       const float* __restrict__ last, float scale, int64_t n) {
    for (int64_t i = first_element(); i < n; i += element_stride()) {
        const float gi = g[i];
        c[i] = __fadd_rn(__fmul_rn(__fsub_rn(gi, last[i]), scale), gi);
    }
}

__global__ void mars_update_kernel(float* __restrict__ p, const float* __restrict__ c, const float* __restrict__ g,
                                   float* __restrict__ last, float* __restrict__ m, float* __restrict__ v, int64_t n,
                                   double c_norm, Ops::MarsScalars s) {
    const bool clip = c_norm > 1.0;
    for (int64_t i = first_element(); i < n; i += element_stride()) {
        const float ci = clip ? __double2float_rn(__ddiv_rn(static_cast<double>(c[i]), c_norm)) : c[i];
        const float mi = __fadd_rn(__fmul_rn(m[i], s.beta1), __fmul_rn(s.one_minus_beta1, ci));
        const float vi = __fadd_rn(__fmul_rn(v[i], s.beta2), __fmul_rn(__fmul_rn(s.one_minus_beta2, ci), ci));
        const float denom = __fmul_rn(__fadd_rn(__fmul_rn(__fsqrt_rn(vi), s.inv_bc2_sqrt), s.eps), s.bc1);
        const float pi = p[i];
        p[i] = __fadd_rn(pi, __fmul_rn(s.neg_lr, __fadd_rn(__fmul_rn(pi, s.weight_decay), __fdiv_rn(mi, denom))));
        m[i] = mi;
        v[i] = vi;
        last[i] = g[i];
    }
}

}  // namespace

void CudaOps::mars_correction(Tensor& c, const Tensor& grad, const Tensor& last_grad, float scale) {
    const OpTimer timer(*this, "mars_correction");
    check_optimizer_tensors("mars_correction", Device::cuda, {{"c", &c}, {"grad", &grad}, {"last_grad", &last_grad}});
    const int64_t n = c.numel();
    if (n == 0) return;
    mars_correction_kernel<<<elementwise_blocks(n), kElementwiseThreads, 0, context().stream>>>(
        static_cast<float*>(c.data()), static_cast<const float*>(grad.data()),
        static_cast<const float*>(last_grad.data()), scale, n);
    CUDA_CHECK_LAUNCH();
}

void CudaOps::mars_update(Tensor& param, const Tensor& c, const Tensor& grad, Tensor& last_grad, Tensor& m, Tensor& v,
                          double c_norm, const MarsScalars& s) {
    const OpTimer timer(*this, "mars_update");
    check_optimizer_tensors("mars_update", Device::cuda,
                            {{"param", &param}, {"c", &c}, {"grad", &grad}, {"last_grad", &last_grad}, {"m", &m},
                             {"v", &v}});
    const int64_t n = param.numel();
    if (n == 0) return;
    mars_update_kernel<<<elementwise_blocks(n), kElementwiseThreads, 0, context().stream>>>(
        static_cast<float*>(param.data()), static_cast<const float*>(c.data()), static_cast<const float*>(grad.data()),
        static_cast<float*>(last_grad.data()), static_cast<float*>(m.data()), static_cast<float*>(v.data()), n, c_norm,
        s);
    CUDA_CHECK_LAUNCH();
}

}  // namespace nb::cuda

// MARS-AdamW's two kernels (AGI-Arena/MARS, approximate gradient difference), moved here from optim/mars.cpp
// with their arithmetic unchanged; the optimizer takes ||c||_F (sum_squares, in double) in between:
//   mars_correction:  c = (g - last)*scale + g
//   mars_update:      c' = c_norm > 1 ? f32(double(c) / c_norm) : c
//                     m = m*b1 + (1-b1)*c' ;  v = v*b2 + ((1-b2)*c')*c'
//                     denom = (sqrt(v)*inv_bc2_sqrt + eps)*bc1 ;  p = p + neg_lr*(p*wd + m/denom) ;  last = g
#include <cmath>

#include "src/cpu/cpu_ops.h"
#include "src/ops/optimizer_checks.h"

namespace nb {

void CpuOps::mars_correction(Tensor& c, const Tensor& grad, const Tensor& last_grad, float scale) {
    const OpTimer timer(*this, "mars_correction");
    check_optimizer_tensors("mars_correction", Device::cpu, {{"c", &c}, {"grad", &grad}, {"last_grad", &last_grad}});
    float* cp = c.f32();
    const float *g = grad.f32(), *last = last_grad.f32();
    for (int64_t j = 0, n = c.numel(); j < n; ++j) cp[j] = (g[j] - last[j]) * scale + g[j];
}

void CpuOps::mars_update(Tensor& param, const Tensor& c, const Tensor& grad, Tensor& last_grad, Tensor& m, Tensor& v,
                         double c_norm, const MarsScalars& s) {
    const OpTimer timer(*this, "mars_update");
    check_optimizer_tensors("mars_update", Device::cpu,
                            {{"param", &param}, {"c", &c}, {"grad", &grad}, {"last_grad", &last_grad}, {"m", &m},
                             {"v", &v}});
    const bool clip = c_norm > 1.0;
    float* p = param.f32();
    const float *cp = c.f32(), *g = grad.f32();
    float *last = last_grad.f32(), *mp = m.f32(), *vp = v.f32();
    for (int64_t j = 0, n = param.numel(); j < n; ++j) {
        const float cj = clip ? static_cast<float>(cp[j] / c_norm) : cp[j];
        mp[j] = mp[j] * s.beta1 + s.one_minus_beta1 * cj;
        vp[j] = vp[j] * s.beta2 + s.one_minus_beta2 * cj * cj;
        const float denom = (std::sqrt(vp[j]) * s.inv_bc2_sqrt + s.eps) * s.bc1;
        p[j] += s.neg_lr * (p[j] * s.weight_decay + mp[j] / denom);
        last[j] = g[j];
    }
}

}  // namespace nb

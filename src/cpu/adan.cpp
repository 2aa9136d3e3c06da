// Adan's update (sail-sg/Adan's single-tensor path, proximal decay), moved here from optim/adan.cpp with its
// arithmetic unchanged; the scalars come from adan_scalars() (src/ops/optimizer_scalars.h):
//   diff = first_step ? 0 : g - prev
//   m = m*b1 + (1-b1)*g ;  m_diff = m_diff*b2 + (1-b2)*diff ;  u = g + b2*diff ;  n = n*b3 + ((1-b3)*u)*u
//   denom = sqrt(n) / bc3_sqrt + eps
//   p = p - (step_size*m) / denom ;  p = p - (step_size_diff*m_diff) / denom ;  p = p / shrink ;  prev = g
#include <cmath>

#include "src/cpu/cpu_ops.h"
#include "src/ops/optimizer_checks.h"

namespace nb {

void CpuOps::adan_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& m_diff, Tensor& n, Tensor& prev_grad,
                         const AdanScalars& s) {
    const OpTimer timer(*this, "adan_update");
    check_optimizer_tensors("adan_update", Device::cpu,
                            {{"param", &param}, {"grad", &grad}, {"m", &m}, {"m_diff", &m_diff}, {"n", &n},
                             {"prev_grad", &prev_grad}});
    float* p = param.f32();
    const float* g = grad.f32();
    float *mp = m.f32(), *d = m_diff.f32(), *np = n.f32(), *prev = prev_grad.f32();
    for (int64_t j = 0, count = param.numel(); j < count; ++j) {
        const float diff = s.first_step ? 0.0f : g[j] - prev[j];
        mp[j] = mp[j] * s.beta1 + s.one_minus_beta1 * g[j];
        d[j] = d[j] * s.beta2 + s.one_minus_beta2 * diff;
        const float u = g[j] + s.beta2 * diff;
        np[j] = np[j] * s.beta3 + s.one_minus_beta3 * u * u;
        const float denom = std::sqrt(np[j]) / s.bc3_sqrt + s.eps;
        p[j] -= s.step_size * mp[j] / denom;
        p[j] -= s.step_size_diff * d[j] / denom;
        p[j] /= s.shrink;
        prev[j] = g[j];
    }
}

}  // namespace nb

// Lion's update (lucidrains/lion-pytorch), moved here from optim/lion.cpp with its arithmetic unchanged:
//   p = p * (1 - lr*wd) ;  p = p - lr * sign(fma(g, 1-b1, m*b1)) ;  m = fma(g, 1-b2, m*b2)
// lion-pytorch's lerp-based interpolation rounds once per element (an FMA) in torch's kernels; std::fma spells
// that out under -ffp-contract=off (the oracle test checks the bits against torch).
#include <cmath>

#include "src/cpu/cpu_ops.h"
#include "src/ops/optimizer_checks.h"
#include "src/ops/optimizer_scalars.h"

namespace nb {

// sign(0) = 0, as torch.sign: a coordinate with no signal does not move.
static float sign_of(float x) { return x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : 0.0f); }

void CpuOps::lion_update(Tensor& param, const Tensor& grad, Tensor& m, float lr, float beta1, float beta2,
                         float weight_decay) {
    const OpTimer timer(*this, "lion_update");
    check_optimizer_tensors("lion_update", Device::cpu, {{"param", &param}, {"grad", &grad}, {"m", &m}});
    const float decay = decoupled_decay(lr, weight_decay);
    const float one_minus_b1 = 1.0f - beta1, one_minus_b2 = 1.0f - beta2;
    float* p = param.f32();
    const float* g = grad.f32();
    float* mp = m.f32();
    for (int64_t j = 0, n = param.numel(); j < n; ++j) {
        p[j] *= decay;
        p[j] -= lr * sign_of(std::fma(g[j], one_minus_b1, mp[j] * beta1));
        mp[j] = std::fma(g[j], one_minus_b2, mp[j] * beta2);
    }
}

}  // namespace nb

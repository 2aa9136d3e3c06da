// Muon's element-wise kernels (KellerJordan/Muon), moved here from optim/muon.cpp with their arithmetic
// unchanged (its Newton-Schulz iteration is src/cpu/newton_schulz.cpp):
//   muon_momentum:  buf = buf + (1-mu)*(g - buf) ;  update = nesterov ? g + mu*(buf - g) : buf
//   muon_apply:     p = p * (1 - lr*wd) ;  p = p - lr*(ortho*scale)
#include "src/cpu/cpu_ops.h"
#include "src/ops/optimizer_checks.h"
#include "src/ops/optimizer_scalars.h"

namespace nb {

void CpuOps::muon_momentum(Tensor& update, const Tensor& grad, Tensor& momentum, float mu, bool nesterov) {
    const OpTimer timer(*this, "muon_momentum");
    check_optimizer_tensors("muon_momentum", Device::cpu,
                            {{"update", &update}, {"grad", &grad}, {"momentum", &momentum}});
    float *u = update.f32(), *buf = momentum.f32();
    const float* g = grad.f32();
    const float one_minus_mu = 1.0f - mu;
    for (int64_t j = 0, n = update.numel(); j < n; ++j) {
        buf[j] += one_minus_mu * (g[j] - buf[j]);
        u[j] = nesterov ? g[j] + mu * (buf[j] - g[j]) : buf[j];
    }
}

void CpuOps::muon_apply(Tensor& param, const Tensor& ortho, float lr, float scale, float weight_decay) {
    const OpTimer timer(*this, "muon_apply");
    check_optimizer_tensors("muon_apply", Device::cpu, {{"param", &param}, {"ortho", &ortho}});
    const float decay = decoupled_decay(lr, weight_decay);
    float* p = param.f32();
    const float* o = ortho.f32();
    for (int64_t j = 0, n = param.numel(); j < n; ++j) {
        p[j] *= decay;
        p[j] -= lr * (o[j] * scale);
    }
}

}  // namespace nb

#include "optim/muon.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "ops.h"
#include "optim/newton_schulz.h"

namespace nb {

bool Muon::takes_muon(const ParamInfo& info) { return info.kind == ParamKind::hidden_matrix && info.shape.size() == 2; }

Muon::Muon(const ParamLayout& layout, const MuonConfig& cfg, Device device) : cfg_(cfg) {
    require_cpu_kernels("muon", device);
    auto hidden = [&](int i) { return takes_muon(layout[i]); };
    auto other = [&](int i) { return !takes_muon(layout[i]); };
    momentum_ = state_.add("momentum_buffer", layout, device, hidden);
    exp_avg_ = state_.add("exp_avg", layout, device, other);
    exp_avg_sq_ = state_.add("exp_avg_sq", layout, device, other);
}

void Muon::step(Ops& ops, const ParamLayout& layout, TensorSet& weights, const TensorSet& grads, float lr) {
    check_step_arguments("Muon", layout, weights, grads);
    const int64_t t = steps_ + 1;
    for (int i = 0; i < layout.size(); ++i) {
        if (takes_muon(layout[i])) {
            muon_update(layout[i], weights[i], grads[i], i, lr);
        } else {
            adamw_param_step(ops, layout[i], weights[i], grads[i], state_.at(exp_avg_, i), state_.at(exp_avg_sq_, i),
                             cfg_.adam, lr * cfg_.adam_lr_ratio, t);
        }
    }
    steps_ = t;
}

void Muon::muon_update(const ParamInfo& info, Tensor& w, const Tensor& grad, int i, float lr) {
    const int64_t rows = info.shape[0], cols = info.shape[1], n = rows * cols;
    float* p = w.f32();
    const float* g = grad.f32();
    float* buf = state_.at(momentum_, i).f32();
    const float mu = cfg_.momentum;
    std::vector<float> u(static_cast<size_t>(n)), o(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) {
        buf[j] += (1.0f - mu) * (g[j] - buf[j]);
        u[j] = cfg_.nesterov ? g[j] + mu * (buf[j] - g[j]) : buf[j];
    }
    newton_schulz5(u.data(), o.data(), rows, cols, cfg_.ns_steps);
    const float scale = std::sqrt(std::max(1.0f, static_cast<float>(rows) / static_cast<float>(cols)));
    const float decay = 1.0f - lr * (info.weight_decay() ? cfg_.weight_decay : 0.0f);
    for (int64_t j = 0; j < n; ++j) {
        p[j] *= decay;
        p[j] -= lr * (o[j] * scale);
    }
}

}  // namespace nb

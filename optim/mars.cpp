#include "optim/mars.h"

#include <cmath>

#include "ops.h"

namespace nb {

static bool is_matrix(const ParamInfo& info) { return info.shape.size() == 2; }

Mars::Mars(const ParamLayout& layout, const MarsConfig& cfg, Device device) : cfg_(cfg) {
    require_cpu_kernels("mars", device);
    exp_avg_ = state_.add_for_all("exp_avg", layout, device);
    exp_avg_sq_ = state_.add_for_all("exp_avg_sq", layout, device);
    last_grad_ = state_.add("last_grad", layout, device, [&](int i) { return is_matrix(layout[i]); });
}

void Mars::step(Ops& ops, const ParamLayout& layout, TensorSet& weights, const TensorSet& grads, float lr) {
    check_step_arguments("Mars", layout, weights, grads);
    const int64_t t = steps_ + 1;
    for (int i = 0; i < layout.size(); ++i) {
        if (is_matrix(layout[i])) {
            mars_update(layout[i], weights[i], grads[i], i, lr, t);
        } else {
            adamw_param_step(ops, layout[i], weights[i], grads[i], state_.at(exp_avg_, i), state_.at(exp_avg_sq_, i),
                             cfg_.adam, lr * cfg_.adam_lr_ratio, t);
        }
    }
    steps_ = t;
}

void Mars::mars_update(const ParamInfo& info, Tensor& w, const Tensor& grad, int i, float lr, int64_t t) {
    const int64_t n = w.numel();
    float* p = w.f32();
    const float* g = grad.f32();
    float* last = state_.at(last_grad_, i).f32();
    float* m = state_.at(exp_avg_, i).f32();
    float* v = state_.at(exp_avg_sq_, i).f32();
    const float b1 = cfg_.beta1, b2 = cfg_.beta2;
    const float scale = static_cast<float>(static_cast<double>(cfg_.gamma) * (b1 / (1.0 - b1)));
    std::vector<float> c(static_cast<size_t>(n));
    double norm_sq = 0;
    for (int64_t j = 0; j < n; ++j) {
        c[j] = (g[j] - last[j]) * scale + g[j];
        norm_sq += static_cast<double>(c[j]) * c[j];
    }
    const double norm = std::sqrt(norm_sq);
    if (norm > 1.0)
        for (float& x : c) x = static_cast<float>(x / norm);
    const float bc1 = static_cast<float>(1.0 - std::pow(static_cast<double>(b1), static_cast<double>(t)));
    const float inv_bc2_sqrt =
        static_cast<float>(1.0 / std::sqrt(1.0 - std::pow(static_cast<double>(b2), static_cast<double>(t))));
    const float wd = info.weight_decay() ? cfg_.weight_decay : 0.0f;
    for (int64_t j = 0; j < n; ++j) {
        m[j] = m[j] * b1 + (1.0f - b1) * c[j];
        v[j] = v[j] * b2 + (1.0f - b2) * c[j] * c[j];
        const float denom = (std::sqrt(v[j]) * inv_bc2_sqrt + cfg_.eps) * bc1;
        p[j] += -lr * (p[j] * wd + m[j] / denom);
        last[j] = g[j];
    }
}

}  // namespace nb

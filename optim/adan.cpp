#include "optim/adan.h"

#include <cmath>

namespace nb {

Adan::Adan(const ParamLayout& layout, const AdanConfig& cfg, Device device) : cfg_(cfg) {
    require_cpu_kernels("adan", device);
    exp_avg_ = state_.add_for_all("exp_avg", layout, device);
    exp_avg_diff_ = state_.add_for_all("exp_avg_diff", layout, device);
    exp_avg_sq_ = state_.add_for_all("exp_avg_sq", layout, device);
    previous_grad_ = state_.add_for_all("previous_grad", layout, device);
}

void Adan::step(Ops&, const ParamLayout& layout, TensorSet& weights, const TensorSet& grads, float lr) {
    check_step_arguments("Adan", layout, weights, grads);
    const int64_t t = steps_ + 1;
    const double b1 = cfg_.beta1, b2 = cfg_.beta2, b3 = cfg_.beta3;
    const float bc3_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(b3, static_cast<double>(t))));
    const float step_size = static_cast<float>(lr / (1.0 - std::pow(b1, static_cast<double>(t))));
    const float step_size_diff = static_cast<float>(lr * b2 / (1.0 - std::pow(b2, static_cast<double>(t))));
    const float beta1 = cfg_.beta1, beta2 = cfg_.beta2, beta3 = cfg_.beta3;
    for (int i = 0; i < layout.size(); ++i) {
        const float shrink = 1.0f + lr * (layout[i].weight_decay() ? cfg_.weight_decay : 0.0f);
        float* p = weights[i].f32();
        const float* g = grads[i].f32();
        float* m = state_.at(exp_avg_, i).f32();
        float* d = state_.at(exp_avg_diff_, i).f32();
        float* n = state_.at(exp_avg_sq_, i).f32();
        float* prev = state_.at(previous_grad_, i).f32();
        for (int64_t j = 0; j < weights[i].numel(); ++j) {
            const float diff = t == 1 ? 0.0f : g[j] - prev[j];
            m[j] = m[j] * beta1 + (1.0f - beta1) * g[j];
            d[j] = d[j] * beta2 + (1.0f - beta2) * diff;
            const float u = g[j] + beta2 * diff;
            n[j] = n[j] * beta3 + (1.0f - beta3) * u * u;
            const float denom = std::sqrt(n[j]) / bc3_sqrt + cfg_.eps;
            p[j] -= step_size * m[j] / denom;
            p[j] -= step_size_diff * d[j] / denom;
            p[j] /= shrink;
            prev[j] = g[j];
        }
    }
    steps_ = t;
}

}  // namespace nb

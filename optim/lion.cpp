#include "optim/lion.h"

#include <cmath>

namespace nb {

Lion::Lion(const ParamLayout& layout, const LionConfig& cfg, Device device) : cfg_(cfg) {
    require_cpu_kernels("lion", device);
    exp_avg_ = state_.add_for_all("exp_avg", layout, device);
}

// sign(0) = 0, as torch.sign: a coordinate with no signal does not move.
static float sign_of(float x) { return x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : 0.0f); }

void Lion::step(Ops&, const ParamLayout& layout, TensorSet& weights, const TensorSet& grads, float lr) {
    check_step_arguments("Lion", layout, weights, grads);
    const float b1 = cfg_.beta1, b2 = cfg_.beta2;
    for (int i = 0; i < layout.size(); ++i) {
        const float decay = 1.0f - lr * (layout[i].weight_decay() ? cfg_.weight_decay : 0.0f);
        float* p = weights[i].f32();
        const float* g = grads[i].f32();
        float* m = state_.at(exp_avg_, i).f32();
        for (int64_t j = 0; j < weights[i].numel(); ++j) {
            p[j] *= decay;
            p[j] -= lr * sign_of(std::fma(g[j], 1.0f - b1, m[j] * b1));
            m[j] = std::fma(g[j], 1.0f - b2, m[j] * b2);
        }
    }
    ++steps_;
}

}  // namespace nb

#include "optim/lion.h"

namespace nb {

Lion::Lion(const ParamLayout& layout, const LionConfig& cfg, Device device) : cfg_(cfg) {
    exp_avg_ = state_.add_for_all("exp_avg", layout, device);
}

int64_t Lion::state_bytes(const ParamLayout& layout, const LionConfig&) {
    return OptimizerState::piece_bytes_for_all(layout);  // exp_avg
}

void Lion::step(Ops& ops, const ParamLayout& layout, TensorSet& weights, const TensorSet& grads, float lr) {
    check_step_arguments("Lion", layout, weights, grads);
    for (int i = 0; i < layout.size(); ++i) {
        const float wd = layout[i].weight_decay() ? cfg_.weight_decay : 0.0f;
        ops.lion_update(weights[i], grads[i], state_.at(exp_avg_, i), lr, cfg_.beta1, cfg_.beta2, wd);
    }
    ++steps_;
}

}  // namespace nb

#include "optim/adan.h"

#include "src/ops/optimizer_scalars.h"

namespace nb {

Adan::Adan(const ParamLayout& layout, const AdanConfig& cfg, Device device) : cfg_(cfg) {
    exp_avg_ = state_.add_for_all("exp_avg", layout, device);
    exp_avg_diff_ = state_.add_for_all("exp_avg_diff", layout, device);
    exp_avg_sq_ = state_.add_for_all("exp_avg_sq", layout, device);
    previous_grad_ = state_.add_for_all("previous_grad", layout, device);
}

int64_t Adan::state_bytes(const ParamLayout& layout, const AdanConfig&) {
    return 4 * OptimizerState::piece_bytes_for_all(layout);  // exp_avg, exp_avg_diff, exp_avg_sq, previous_grad
}

void Adan::step(Ops& ops, const ParamLayout& layout, TensorSet& weights, const TensorSet& grads, float lr) {
    check_step_arguments("Adan", layout, weights, grads);
    const int64_t t = steps_ + 1;
    for (int i = 0; i < layout.size(); ++i) {
        const float wd = layout[i].weight_decay() ? cfg_.weight_decay : 0.0f;
        const Ops::AdanScalars s = adan_scalars(lr, cfg_.beta1, cfg_.beta2, cfg_.beta3, cfg_.eps, wd, t);
        ops.adan_update(weights[i], grads[i], state_.at(exp_avg_, i), state_.at(exp_avg_diff_, i),
                        state_.at(exp_avg_sq_, i), state_.at(previous_grad_, i), s);
    }
    steps_ = t;
}

}  // namespace nb

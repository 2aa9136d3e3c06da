#include "optim/mars.h"

#include <cmath>
#include <vector>

#include "src/ops/ops.h"
#include "src/ops/optimizer_scalars.h"

namespace nb {

static bool is_matrix(const ParamInfo& info) { return info.shape.size() == 2; }

Mars::Mars(const ParamLayout& layout, const MarsConfig& cfg, Device device) : cfg_(cfg) {
    exp_avg_ = state_.add_for_all("exp_avg", layout, device);
    exp_avg_sq_ = state_.add_for_all("exp_avg_sq", layout, device);
    last_grad_ = state_.add("last_grad", layout, device, [&](int i) { return is_matrix(layout[i]); });
}

int64_t Mars::state_bytes(const ParamLayout& layout, const MarsConfig&) {
    const int64_t last_grad = OptimizerState::piece_bytes(layout, [&](int i) { return is_matrix(layout[i]); });
    return 2 * OptimizerState::piece_bytes_for_all(layout) + last_grad;  // exp_avg, exp_avg_sq; last_grad
}

void Mars::step(Ops& ops, const ParamLayout& layout, TensorSet& weights, const TensorSet& grads, float lr) {
    check_step_arguments("Mars", layout, weights, grads);
    const int64_t t = steps_ + 1;
    std::vector<Ops::AdamWParamRef> adamw_params;
    for (int i = 0; i < layout.size(); ++i) {
        if (is_matrix(layout[i]))
            mars_update(ops, layout[i], weights[i], grads[i], i, lr, t);
        else
            adamw_params.push_back(adamw_param_ref(layout[i], weights[i], grads[i], state_.at(exp_avg_, i),
                                                   state_.at(exp_avg_sq_, i), cfg_.adam));
    }
    adamw_steps(ops, adamw_params, cfg_.adam, lr * cfg_.adam_lr_ratio, t);
    steps_ = t;
}

// c is computed, measured (||c||_F in double), then consumed: a per-step temporary on the backend's device.
void Mars::mars_update(Ops& ops, const ParamInfo& info, Tensor& w, const Tensor& grad, int i, float lr, int64_t t) {
    Tensor& last = state_.at(last_grad_, i);
    Tensor c = ops.f32_output(w.shape());
    ops.mars_correction(c, grad, last, mars_correction_scale(cfg_.gamma, cfg_.beta1));
    const double c_norm = std::sqrt(ops.sum_squares(c));
    const float wd = info.weight_decay() ? cfg_.weight_decay : 0.0f;
    ops.mars_update(w, c, grad, last, state_.at(exp_avg_, i), state_.at(exp_avg_sq_, i), c_norm,
                    mars_scalars(lr, cfg_.beta1, cfg_.beta2, cfg_.eps, wd, t));
}

}  // namespace nb

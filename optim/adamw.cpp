#include "optim/adamw.h"

#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

namespace nb {

// The user's flags are range-checked once, by the optimizer registry (OptimizerConfig::validate, which the plan
// calls); a config out of range here is a caller's bug, not a usage error.
void AdamWConfig::validate() const {
    auto in_unit = [](float b) { return std::isfinite(b) && b >= 0.0f && b < 1.0f; };
    const bool ok = in_unit(beta1) && in_unit(beta2) && std::isfinite(eps) && eps > 0.0f &&
                    std::isfinite(weight_decay) && weight_decay >= 0.0f;
    if (!ok)
        throw std::logic_error(fmt::format("AdamWConfig out of range: beta1 {} beta2 {} eps {} weight_decay {} "
                                           "(the optimizer registry checks the flags)",
                                           beta1, beta2, eps, weight_decay));
}

AdamW::AdamW(const ParamLayout& layout, const AdamWConfig& cfg, Device device) : cfg_(cfg) {
    cfg_.validate();
    exp_avg_ = state_.add_for_all("exp_avg", layout, device);
    exp_avg_sq_ = state_.add_for_all("exp_avg_sq", layout, device);
}

int64_t AdamW::state_bytes(const ParamLayout& layout, const AdamWConfig&) {
    return 2 * OptimizerState::piece_bytes_for_all(layout);  // exp_avg, exp_avg_sq
}

// Decoupled decay for matrices and embeddings; none for norm gains (ParamInfo::weight_decay()).
Ops::AdamWParamRef adamw_param_ref(const ParamInfo& info, Tensor& weight, const Tensor& grad, Tensor& m, Tensor& v,
                                   const AdamWConfig& cfg) {
    return {&weight, &grad, &m, &v, info.weight_decay() ? cfg.weight_decay : 0.0f};
}

void adamw_steps(Ops& ops, const std::vector<Ops::AdamWParamRef>& params, const AdamWConfig& cfg, float lr,
                 int64_t t) {
    ops.adamw_update_multi(params, lr, cfg.beta1, cfg.beta2, cfg.eps, t);
}

void AdamW::step(Ops& ops, const ParamLayout& layout, TensorSet& weights, const TensorSet& grads, float lr) {
    check_step_arguments("AdamW", layout, weights, grads);
    const int64_t t = steps_ + 1;  // torch increments its step before using it: the first step is t = 1
    std::vector<Ops::AdamWParamRef> params;
    for (int i = 0; i < layout.size(); ++i)
        params.push_back(adamw_param_ref(layout[i], weights[i], grads[i], state_.at(exp_avg_, i),
                                         state_.at(exp_avg_sq_, i), cfg_));
    adamw_steps(ops, params, cfg_, lr, t);
    steps_ = t;
}

}  // namespace nb

#include "optim/adamw.h"

#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "error.h"

namespace nb {

void AdamWConfig::validate() const {
    auto in_unit = [](float b) { return std::isfinite(b) && b >= 0.0f && b < 1.0f; };
    if (!in_unit(beta1)) throw UsageError(fmt::format("--adam-beta1 {} must be in [0, 1)", beta1));
    if (!in_unit(beta2)) throw UsageError(fmt::format("--adam-beta2 {} must be in [0, 1)", beta2));
    if (!(std::isfinite(eps) && eps > 0.0f)) throw UsageError(fmt::format("--adam-eps {} must be > 0", eps));
    if (!(std::isfinite(weight_decay) && weight_decay >= 0.0f))
        throw UsageError(fmt::format("--weight-decay {} must be >= 0", weight_decay));
}

AdamW::AdamW(const ParamLayout& layout, const AdamWConfig& cfg, Device device)
    : cfg_(cfg), m_(TensorSet::zeros(layout, DType::f32, device)), v_(TensorSet::zeros(layout, DType::f32, device)) {
    cfg_.validate();
    for (const auto& p : layout.params()) names_.push_back(p.name);
}

// The state was sized for one layout; a different one is a programming error, not a user error.
static void check_matches(const ParamLayout& layout, const TensorSet& state, const TensorSet& weights,
                          const TensorSet& grads) {
    if (layout.size() != state.size() || weights.size() != state.size() || grads.size() != state.size())
        throw std::logic_error(fmt::format("AdamW::step: layout has {} params, state {}, weights {}, grads {}",
                                           layout.size(), state.size(), weights.size(), grads.size()));
    for (int i = 0; i < layout.size(); ++i) {
        const Shape& shape = layout[i].shape;
        if (state[i].shape() != shape || weights[i].shape() != shape || grads[i].shape() != shape)
            throw std::logic_error(fmt::format("AdamW::step: {} expects shape {}, got weight {} grad {} state {}",
                                               layout[i].name, shape_string(shape), shape_string(weights[i].shape()),
                                               shape_string(grads[i].shape()), shape_string(state[i].shape())));
    }
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
    check_matches(layout, m_, weights, grads);
    const int64_t t = steps_taken_ + 1;  // torch increments its step before using it: the first step is t = 1
    std::vector<Ops::AdamWParamRef> params;
    for (int i = 0; i < layout.size(); ++i)
        params.push_back(adamw_param_ref(layout[i], weights[i], grads[i], m_[i], v_[i], cfg_));
    adamw_steps(ops, params, cfg_, lr, t);
    steps_taken_ = t;
}

void AdamW::set_steps_taken(int64_t steps) {
    if (steps < 0) throw std::logic_error(fmt::format("AdamW::set_steps_taken({}): negative", steps));
    steps_taken_ = steps;
}

std::vector<std::pair<std::string, Tensor*>> AdamW::state_tensors() {
    std::vector<std::pair<std::string, Tensor*>> out;
    for (int i = 0; i < m_.size(); ++i) out.emplace_back("exp_avg." + names_[static_cast<size_t>(i)], &m_[i]);
    for (int i = 0; i < v_.size(); ++i) out.emplace_back("exp_avg_sq." + names_[static_cast<size_t>(i)], &v_[i]);
    return out;
}

}  // namespace nb

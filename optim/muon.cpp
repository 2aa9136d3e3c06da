#include "optim/muon.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "src/ops/ops.h"

namespace nb {

bool Muon::takes_muon(const ParamInfo& info) { return info.kind == ParamKind::hidden_matrix && info.shape.size() == 2; }

std::vector<std::vector<int>> Muon::hidden_matrix_groups(const ParamLayout& layout) {
    std::vector<std::vector<int>> groups;
    for (int i = 0; i < layout.size(); ++i) {
        if (!takes_muon(layout[i])) continue;
        auto same_shape = [&](const std::vector<int>& g) { return layout[g.front()].shape == layout[i].shape; };
        auto it = std::find_if(groups.begin(), groups.end(), same_shape);
        if (it == groups.end()) groups.push_back({i});
        else it->push_back(i);
    }
    return groups;
}

Muon::Muon(const ParamLayout& layout, const MuonConfig& cfg, Device device) : cfg_(cfg) {
    auto hidden = [&](int i) { return takes_muon(layout[i]); };
    auto other = [&](int i) { return !takes_muon(layout[i]); };
    momentum_ = state_.add("momentum_buffer", layout, device, hidden);
    exp_avg_ = state_.add("exp_avg", layout, device, other);
    exp_avg_sq_ = state_.add("exp_avg_sq", layout, device, other);
}

int64_t Muon::state_bytes(const ParamLayout& layout, const MuonConfig&) {
    const int64_t hidden = OptimizerState::piece_bytes(layout, [&](int i) { return takes_muon(layout[i]); });
    const int64_t other = OptimizerState::piece_bytes(layout, [&](int i) { return !takes_muon(layout[i]); });
    return hidden + 2 * other;  // momentum_buffer; exp_avg, exp_avg_sq
}

void Muon::step(Ops& ops, const ParamLayout& layout, TensorSet& weights, const TensorSet& grads, float lr) {
    check_step_arguments("Muon", layout, weights, grads);
    const int64_t t = steps_ + 1;
    for (const std::vector<int>& group : hidden_matrix_groups(layout))
        muon_update(ops, layout, group, weights, grads, lr);
    std::vector<Ops::AdamWParamRef> adamw_params;
    for (int i = 0; i < layout.size(); ++i)
        if (!takes_muon(layout[i]))
            adamw_params.push_back(adamw_param_ref(layout[i], weights[i], grads[i], state_.at(exp_avg_, i),
                                                   state_.at(exp_avg_sq_, i), cfg_.adam));
    adamw_steps(ops, adamw_params, cfg_.adam, lr * cfg_.adam_lr_ratio, t);
    steps_ = t;
}

// The momentum directions of the whole group are orthogonalised in place, in one batched newton_schulz call.
void Muon::muon_update(Ops& ops, const ParamLayout& layout, const std::vector<int>& group, TensorSet& weights,
                       const TensorSet& grads, float lr) {
    const Shape& shape = layout[group.front()].shape;
    std::vector<Tensor> directions;
    for (int i : group) {
        directions.push_back(ops.f32_output(shape));
        ops.muon_momentum(directions.back(), grads[i], state_.at(momentum_, i), cfg_.momentum, cfg_.nesterov);
    }
    std::vector<Tensor*> outs;
    std::vector<const Tensor*> ins;
    for (Tensor& d : directions) {
        outs.push_back(&d);
        ins.push_back(&d);
    }
    ops.newton_schulz(outs, ins, cfg_.ns_steps);
    const float scale = std::sqrt(std::max(1.0f, static_cast<float>(shape[0]) / static_cast<float>(shape[1])));
    for (size_t k = 0; k < group.size(); ++k) {
        const int i = group[k];
        const float wd = layout[i].weight_decay() ? cfg_.weight_decay : 0.0f;
        ops.muon_apply(weights[i], directions[k], lr, scale, wd);
    }
}

}  // namespace nb

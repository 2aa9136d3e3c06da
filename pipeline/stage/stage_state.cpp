#include "pipeline/stage/stage_state.h"

#include "model/named_weights.h"

namespace nb {

namespace {

std::vector<TensorShard> every_tensor_whole(const ParamLayout& layout) {
    std::vector<TensorShard> all;
    for (int i = 0; i < layout.size(); ++i) all.push_back({i, 0, layout[i].shape.empty() ? 1 : layout[i].shape[0], 0});
    return all;
}

bool whole(const TensorShard& s, const ParamLayout& layout) {
    return s.row_begin == 0 && s.row_end == (layout[s.tensor].shape.empty() ? 1 : layout[s.tensor].shape[0]);
}

// The owned rows as parameters: each its parameter's name and kind, its shape cut to the rows.
ParamLayout shard_layout(const ParamLayout& layout, const std::vector<TensorShard>& owned) {
    ParamLayout out;
    for (const TensorShard& s : owned) {
        ParamInfo info = layout[s.tensor];
        if (!info.shape.empty()) info.shape[0] = s.row_end - s.row_begin;
        out.add(info);
    }
    return out;
}

// The stage's first weights: --init-from-hf's or --pretrained-checkpoint's by name where given (any cut: a tied
// head's copy takes the embedding's), else from --seed.
TensorSet initial_weights(const StageModel& model, const TrainOptions& o) {
    if (!o.initial_weights) return model.init_weights(o.seed);
    return weights_for_layout(model.layout(), *o.initial_weights, o.initial_weights_source);
}

}  // namespace

StageState::StageState(const TrainOptions& o, const StageSpec& spec, Device device)
    : StageState(o, spec, device, every_tensor_whole(StageModel(o.model, spec).layout())) {}

StageState::StageState(const TrainOptions& o, const StageSpec& spec, Device device, std::vector<TensorShard> shards)
    : model(o.model, spec),
      master(initial_weights(model, o).to(device)),
      grads(TensorSet::zeros(model.layout(), DType::f32, device)),
      owned(std::move(shards)),
      optimizer_layout(shard_layout(model.layout(), owned)),
      optimizer(o.optimizer, o.delay_fix, optimizer_layout, o.lr.lr, device, o.model.moe.bias_update_rate) {
    sharded_ = static_cast<int>(owned.size()) != model.layout().size();
    for (size_t k = 0; k < owned.size() && !sharded_; ++k)
        sharded_ = owned[k].tensor != static_cast<int>(k) || !whole(owned[k], model.layout());
}

TensorSet StageState::optimizer_view(const TensorSet& set) const {
    if (!sharded_) return set;
    TensorSet views;
    for (const TensorShard& s : owned)
        views.tensors.push_back(whole(s, model.layout()) ? set[s.tensor] : set[s.tensor].rows(s.row_begin, s.row_end));
    return views;
}

Tensor StageState::own_rows(const std::string& name, const Tensor& saved) const {
    if (!sharded_ || name.starts_with("weights.")) return saved;
    const ParamLayout& layout = model.layout();
    for (size_t dot = name.find('.'); dot != std::string::npos; dot = name.find('.', dot + 1)) {
        const int param = layout.index_of(name.substr(dot + 1));
        if (param < 0) continue;
        for (const TensorShard& s : owned)
            if (s.tensor == param && !whole(s, layout)) return saved.rows(s.row_begin, s.row_end);
        return saved;
    }
    return saved;
}

std::vector<std::pair<std::string, Tensor*>> StageState::state_tensors() {
    std::vector<std::pair<std::string, Tensor*>> named;
    const ParamLayout& layout = model.layout();
    for (int i = 0; i < layout.size(); ++i) named.emplace_back("weights." + layout[i].name, &master[i]);
    for (auto& entry : optimizer.state_tensors()) named.push_back(std::move(entry));
    return named;
}

}  // namespace nb

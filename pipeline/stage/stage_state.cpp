#include "pipeline/stage/stage_state.h"

#include <numeric>

namespace nb {

namespace {

std::vector<int> every_index(const ParamLayout& layout) {
    std::vector<int> all(static_cast<size_t>(layout.size()));
    std::iota(all.begin(), all.end(), 0);
    return all;
}

ParamLayout select_layout(const ParamLayout& layout, const std::vector<int>& index) {
    ParamLayout out;
    for (int i : index) out.add(layout[i]);
    return out;
}

}  // namespace

StageState::StageState(const TrainOptions& o, const StageSpec& spec, Device device)
    : StageState(o, spec, device, every_index(StageModel(o.model, spec).layout())) {}

StageState::StageState(const TrainOptions& o, const StageSpec& spec, Device device, const std::vector<int>& owned_index)
    : model(o.model, spec),
      master(model.init_weights(o.seed).to(device)),
      grads(TensorSet::zeros(model.layout(), DType::f32, device)),
      owned(owned_index),
      optimizer_layout(select_layout(model.layout(), owned)),
      optimizer(o.optimizer, o.delay_fix, optimizer_layout, o.lr.lr, device, o.model.moe.bias_update_rate) {}

TensorSet StageState::optimizer_view(const TensorSet& set) const {
    if (!sharded()) return set;
    return select_tensors(set, owned);
}

std::vector<std::pair<std::string, Tensor*>> StageState::state_tensors() {
    std::vector<std::pair<std::string, Tensor*>> named;
    const ParamLayout& layout = model.layout();
    for (int i = 0; i < layout.size(); ++i) named.emplace_back("weights." + layout[i].name, &master[i]);
    for (auto& entry : optimizer.state_tensors()) named.push_back(std::move(entry));
    return named;
}

}  // namespace nb

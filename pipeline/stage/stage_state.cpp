#include "pipeline/stage/stage_state.h"

namespace nb {

StageState::StageState(const TrainOptions& o, const StageSpec& spec, Device device)
    : model(o.model, spec),
      master(model.init_weights(o.seed).to(device)),
      grads(TensorSet::zeros(model.layout(), DType::f32, device)),
      optimizer(o.optimizer, o.delay_fix, model.layout(), o.lr.lr, device, o.model.moe.bias_update_rate) {}

std::vector<std::pair<std::string, Tensor*>> StageState::state_tensors() {
    std::vector<std::pair<std::string, Tensor*>> named;
    const ParamLayout& layout = model.layout();
    for (int i = 0; i < layout.size(); ++i) named.emplace_back("weights." + layout[i].name, &master[i]);
    for (auto& entry : optimizer.state_tensors()) named.push_back(std::move(entry));
    return named;
}

}  // namespace nb

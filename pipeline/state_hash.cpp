#include "pipeline/state_hash.h"

#include "weights_hash.h"

namespace nb {

std::vector<Tensor> optimizer_state_in_order(Optimizer& optimizer) {
    std::vector<Tensor> state;
    for (const auto& [name, t] : optimizer.state_tensors()) state.push_back(*t);
    return state;
}

std::vector<Shape> optimizer_state_shapes(const ParamLayout& layout) {
    std::vector<Shape> shapes;
    for (int copy = 0; copy < 2; ++copy)
        for (int i = 0; i < layout.size(); ++i) shapes.push_back(layout[i].shape);
    return shapes;
}

std::string stages_sha256(const std::vector<std::vector<Tensor>>& per_stage) {
    TensorSet all;
    for (const auto& stage : per_stage)
        for (const Tensor& t : stage) all.tensors.push_back(t.to(Device::cpu));
    return weights_sha256(all);
}

}  // namespace nb

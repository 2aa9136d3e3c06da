#include "optim/stage_optimizer.h"

#include "optim/make_optimizer.h"
#include "optim/optimizer_registry.h"

namespace nb {

StageOptimizer::StageOptimizer(const OptimizerConfig& optimizer, const DelayFixConfig& delay_fix,
                               const ParamLayout& layout, double peak_lr, Device device)
    : optimizer_(make_optimizer(optimizer, layout, peak_lr, device)), delay_fix_(delay_fix, layout, device) {}

void StageOptimizer::step(Ops& ops, const ParamLayout& layout, TensorSet& master, TensorSet& grads, float lr,
                          bool asynchronous, const TensorSet* stale) {
    delay_fix_.step(ops, *optimizer_, layout, master, grads, lr, asynchronous, stale);
}

std::vector<std::pair<std::string, Tensor*>> StageOptimizer::state_tensors() {
    std::vector<std::pair<std::string, Tensor*>> all = optimizer_->state_tensors();
    for (auto& entry : delay_fix_.state_tensors()) all.push_back(std::move(entry));
    return all;
}

std::vector<Tensor> StageOptimizer::state_in_order() {
    std::vector<Tensor> state;
    for (const auto& [name, t] : state_tensors()) state.push_back(*t);
    return state;
}

int64_t stage_optimizer_state_bytes(const OptimizerConfig& optimizer, const DelayFixConfig& delay_fix,
                                    const ParamLayout& layout) {
    return optimizer_state_bytes(optimizer, layout) + DelayFix::state_bytes(delay_fix, layout);
}

std::vector<Shape> stage_optimizer_state_shapes(const OptimizerConfig& optimizer, const DelayFixConfig& delay_fix,
                                                const ParamLayout& layout, double peak_lr) {
    StageOptimizer host(optimizer, delay_fix, layout, peak_lr, Device::cpu);
    std::vector<Shape> shapes;
    for (const auto& [name, t] : host.state_tensors()) shapes.push_back(t->shape());
    return shapes;
}

}  // namespace nb

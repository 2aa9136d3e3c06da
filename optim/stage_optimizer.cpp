#include "optim/stage_optimizer.h"

#include <stdexcept>

#include <fmt/format.h>

#include "optim/make_optimizer.h"
#include "optim/optimizer_registry.h"

namespace nb {

StageOptimizer::StageOptimizer(const OptimizerConfig& optimizer, const DelayFixConfig& delay_fix,
                               const ParamLayout& layout, double peak_lr, Device device,
                               double expert_bias_update_rate)
    : trainable_(trainable_params(layout)),
      optimizer_(make_optimizer(optimizer, trainable_.layout, peak_lr, device)),
      delay_fix_(delay_fix, trainable_.layout, device),
      expert_bias_update_rate_(static_cast<float>(expert_bias_update_rate)) {}

TensorSet StageOptimizer::trainable_view(const ParamLayout& layout, const TensorSet& set) const {
    // A gradient set may hold one slot more than the layout (a tied head's half, model/tied_head_grad.h): not read.
    if (set.size() < layout.size() || set.size() > layout.size() + 1 || layout.size() < trainable_.layout.size())
        throw std::logic_error(fmt::format("StageOptimizer: a set of {} tensors for a layout of {}", set.size(),
                                           layout.size()));
    return select_tensors(set, trainable_.index);
}

void StageOptimizer::step(Ops& ops, const ParamLayout& layout, TensorSet& master, TensorSet& grads, float lr,
                          bool asynchronous, const TensorSet* stale) {
    if (asynchronous) compensate(ops, layout, master, grads, stale);
    update(ops, layout, master, grads, lr, asynchronous);
}

void StageOptimizer::compensate(Ops& ops, const ParamLayout& layout, const TensorSet& master, TensorSet& grads,
                                const TensorSet* stale) {
    TensorSet g = trainable_view(layout, grads);
    const TensorSet stale_view = stale ? trainable_view(layout, *stale) : TensorSet{};
    delay_fix_.compensate(ops, trainable_.layout, trainable_view(layout, master), g, stale ? &stale_view : nullptr);
}

void StageOptimizer::update(Ops& ops, const ParamLayout& layout, TensorSet& master, TensorSet& grads, float lr,
                            bool asynchronous) {
    TensorSet w = trainable_view(layout, master), g = trainable_view(layout, grads);
    delay_fix_.update(ops, *optimizer_, trainable_.layout, w, g, lr, asynchronous);
    update_expert_biases(ops, layout, master, grads);
}

void StageOptimizer::predict_weights(Ops& ops, const ParamLayout& layout, const TensorSet& master, TensorSet& out,
                                     int64_t updates_ahead) const {
    TensorSet predicted = trainable_view(layout, out);
    delay_fix_.predict_weights(ops, trainable_view(layout, master), predicted, updates_ahead);
}

void StageOptimizer::update_expert_biases(Ops& ops, const ParamLayout& layout, TensorSet& master,
                                          const TensorSet& grads) const {
    for (int i = 0; i < layout.size(); ++i)
        if (layout[i].kind == ParamKind::expert_bias)
            ops.moe_expert_bias_update(master[i], grads[i], expert_bias_update_rate_);
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
    const ParamLayout trainable = trainable_params(layout).layout;
    return optimizer_state_bytes(optimizer, trainable) + DelayFix::state_bytes(delay_fix, trainable);
}

std::vector<std::pair<std::string, Shape>> stage_optimizer_state_entries(const OptimizerConfig& optimizer,
                                                                         const DelayFixConfig& delay_fix,
                                                                         const ParamLayout& layout, double peak_lr) {
    StageOptimizer host(optimizer, delay_fix, layout, peak_lr, Device::cpu, 0.0);  // the rate changes no shape
    std::vector<std::pair<std::string, Shape>> entries;
    for (const auto& [name, t] : host.state_tensors()) entries.emplace_back(name, t->shape());
    return entries;
}

std::vector<Shape> stage_optimizer_state_shapes(const OptimizerConfig& optimizer, const DelayFixConfig& delay_fix,
                                                const ParamLayout& layout, double peak_lr) {
    std::vector<Shape> shapes;
    for (auto& [name, shape] : stage_optimizer_state_entries(optimizer, delay_fix, layout, peak_lr))
        shapes.push_back(std::move(shape));
    return shapes;
}

}  // namespace nb

// The parts of a layer's backward that are the same for every layer: fused or split into B and W.
#include "model/layer.h"

#include <stdexcept>

namespace nb {

size_t Stash::bytes() const {
    return (saved ? saved->bytes() : 0) + defined_bytes(recompute_input) + held_bytes(deferred);
}

void Stash::throw_wrong_saved() {
    throw std::logic_error("a layer's backward was given a stash its forward did not fill");
}

Tensor Layer::backward(const LayerContext& ctx, const Tensor& dout, Stash& stash) const {
    WeightGrads now(ctx.ops, ctx.weights, *ctx.grads, nullptr);
    return backward_pass(ctx, dout, stash, now);
}

Tensor Layer::backward_input(const LayerContext& ctx, const Tensor& dout, Stash& stash) const {
    if (!stash.deferred.empty()) throw std::logic_error(name() + ": backward_input twice on one stash");
    WeightGrads later(ctx.ops, ctx.weights, *ctx.grads, &stash.deferred);
    Tensor dx = backward_pass(ctx, dout, stash, later);
    stash.saved.reset();  // what W still reads, the records hold
    return dx;
}

void Layer::backward_weight(const LayerContext& ctx, Stash& stash) const {
    for (const WeightGradOp& op : stash.deferred) run_weight_grad(ctx.ops, ctx.weights, *ctx.grads, op);
    stash = {};
}

}  // namespace nb

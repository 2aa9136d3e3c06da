#include "model/model_step.h"

#include <stdexcept>
#include <string>

#include "model/tied_head_grad.h"

namespace nb {

namespace {

void require_whole_model(const StageModel& model) {
    if (!model.spec().has_embedding || !model.spec().has_head)
        throw std::logic_error("forward_backward needs a model with embedding and head");
}

void require_stashes_of(const StageModel& model, const std::vector<Stash>& stashes, const char* who) {
    if (stashes.size() != model.layers().size())
        throw std::logic_error(std::string(who) + ": the stashes do not come from this stage's forward");
}

// Layer `layer`'s context: `ctx`, or for a tied head with its own gradient slot, `ctx` writing that slot
// (model/tied_head_grad.h; `view` and `grads` hold what it refers to).
LayerContext layer_context(const StageModel& model, size_t layer, const LayerContext& ctx, TensorSet& view) {
    return {ctx.ops, ctx.weights, layer_grads(model, layer, ctx.grads, view), ctx.batch, ctx.moe};
}

}  // namespace

Tensor stage_forward(const StageModel& model, const LayerContext& ctx, Tensor x, std::vector<Stash>* stashes) {
    const auto& layers = model.layers();
    if (stashes) stashes->resize(layers.size());
    for (size_t i = 0; i < layers.size(); ++i) x = layers[i]->forward(ctx, x, stashes ? &(*stashes)[i] : nullptr);
    return x;
}

Tensor stage_backward(const StageModel& model, const LayerContext& ctx, Tensor dy, std::vector<Stash>& stashes,
                      GradsDoneObserver* done) {
    const auto& layers = model.layers();
    require_stashes_of(model, stashes, "stage_backward");
    TensorSet view;
    for (size_t i = layers.size(); i-- > 0;) {
        dy = layers[i]->backward(layer_context(model, i, ctx, view), dy, stashes[i]);
        stashes[i] = {};  // free activations as soon as they are consumed
        if (done) done->grads_done_from(model.first_param(i));
    }
    return dy;
}

Tensor stage_backward_input(const StageModel& model, const LayerContext& ctx, Tensor dy, std::vector<Stash>& stashes) {
    const auto& layers = model.layers();
    require_stashes_of(model, stashes, "stage_backward_input");
    TensorSet view;
    for (size_t i = layers.size(); i-- > 0;)
        dy = layers[i]->backward_input(layer_context(model, i, ctx, view), dy, stashes[i]);
    return dy;
}

void stage_backward_weight(const StageModel& model, const LayerContext& ctx, std::vector<Stash>& stashes,
                           GradsDoneObserver* done) {
    const auto& layers = model.layers();
    require_stashes_of(model, stashes, "stage_backward_weight");
    TensorSet view;
    for (size_t i = layers.size(); i-- > 0;) {
        layers[i]->backward_weight(layer_context(model, i, ctx, view), stashes[i]);
        if (done) done->grads_done_from(model.first_param(i));
    }
}

size_t stash_bytes(const std::vector<Stash>& stashes) {
    size_t n = 0;
    for (const Stash& s : stashes) n += s.bytes();
    return n;
}

Tensor loss_gradient(float dloss) {
    Tensor d = Tensor::zeros({1});
    d.f32()[0] = dloss;
    return d;
}

float forward_backward(Ops& ops, const StageModel& model, const TensorSet& weights, TensorSet& grads,
                       const Microbatch& batch, float dloss, MoeObserver* moe) {
    require_whole_model(model);
    LayerContext ctx{ops, weights, &grads, batch, moe};
    std::vector<Stash> stashes;
    const float loss = stage_forward(model, ctx, Tensor{}, &stashes).f32()[0];
    stage_backward(model, ctx, loss_gradient(dloss), stashes);
    return loss;
}

float forward_loss(Ops& ops, const StageModel& model, const TensorSet& weights, const Microbatch& batch) {
    require_whole_model(model);
    LayerContext ctx{ops, weights, nullptr, batch};
    return stage_forward(model, ctx, Tensor{}, nullptr).f32()[0];
}

}  // namespace nb

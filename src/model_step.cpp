#include "model_step.h"

#include <stdexcept>

namespace nb {

namespace {

void require_whole_model(const StageModel& model) {
    if (!model.spec().has_embedding || !model.spec().has_head)
        throw std::logic_error("forward_backward needs a model with embedding and head");
}

}  // namespace

float forward_backward(Ops& ops, const StageModel& model, const TensorSet& weights, TensorSet& grads,
                       const Microbatch& batch, float dloss) {
    require_whole_model(model);
    const auto& layers = model.layers();
    LayerContext ctx{ops, weights, &grads, batch};
    std::vector<Stash> stashes(layers.size());
    Tensor x;
    for (size_t i = 0; i < layers.size(); ++i) x = layers[i]->forward(ctx, x, &stashes[i]);
    const float loss = x.f32()[0];
    Tensor dx = Tensor::zeros({1});
    dx.f32()[0] = dloss;
    for (size_t i = layers.size(); i-- > 0;) {
        dx = layers[i]->backward(ctx, dx, stashes[i]);
        stashes[i] = {};  // free activations as soon as they are consumed
    }
    return loss;
}

float forward_loss(Ops& ops, const StageModel& model, const TensorSet& weights, const Microbatch& batch) {
    require_whole_model(model);
    LayerContext ctx{ops, weights, nullptr, batch};
    Tensor x;
    for (const auto& layer : model.layers()) x = layer->forward(ctx, x, nullptr);
    return x.f32()[0];
}

}  // namespace nb

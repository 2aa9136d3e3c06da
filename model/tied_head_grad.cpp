#include "model/tied_head_grad.h"

namespace nb {

bool holds_both_tied_ends(const StageModel& model) {
    return model.config().tie_embeddings && model.spec().has_embedding && model.spec().has_head;
}

TensorSet gradient_slots(const StageModel& model, Device device) {
    TensorSet grads = TensorSet::zeros(model.layout(), DType::f32, device);
    if (holds_both_tied_ends(model)) grads.tensors.push_back(Tensor::zeros(grads[0].shape(), DType::f32, device));
    return grads;
}

int tied_head_slot(const StageModel& model, const TensorSet& grads) {
    const int n = model.layout().size();
    return holds_both_tied_ends(model) && grads.size() == n + 1 ? n : -1;
}

TensorSet* layer_grads(const StageModel& model, size_t layer, TensorSet* grads, TensorSet& view) {
    if (!grads || layer + 1 != model.layers().size()) return grads;  // the head is the last layer
    const int slot = tied_head_slot(model, *grads);
    if (slot < 0) return grads;
    view = *grads;
    view[0] = (*grads)[slot];  // "embedding.weight" is slot 0 of every layout that holds it
    return &view;
}

void add_tied_head_half(Ops& ops, const StageModel& model, TensorSet& grads) {
    const int slot = tied_head_slot(model, grads);
    if (slot < 0) return;
    ops.add_inplace(grads[0], grads[slot]);
    grads[slot].zero();
}

}  // namespace nb

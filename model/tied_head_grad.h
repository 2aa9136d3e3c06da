// Tied embeddings (docs/DESIGN.md section 2, "Tied embeddings"): the gradient of the one matrix that the
// embedding and the LM head share comes in two halves, the head's (dL/dW from the logits) and the embedding's
// (the rows of the tokens read). Each half is summed on its own, over the step's microbatches in microbatch
// order (and over the replicas in replica order, for D > 1), and only then are the two added:
//
//   g = E + H,   E = (0 + e_0) + e_1 + ...,   H = (0 + h_0) + h_1 + ...   (f32 adds; E + H == H + E bit for bit)
//
// This is the order a pipeline can keep: with P > 1 the embedding (first part) and the head (last part) each hold
// a copy of the matrix and sum their own half (pipeline/stage/tied_gradient.h adds the two at the step). A stage
// that holds both ends (the one-stage model) keeps the head's half in one more gradient slot after its layout's
// (tied_head_slot), which the head's backward writes instead of the embedding's slot, and adds it at the step.
#pragma once

#include "model/params.h"
#include "model/stage_model.h"
#include "src/ops/ops.h"

namespace nb {

// Whether `model` holds both ends of a tied matrix (the embedding and a head that reuses it).
bool holds_both_tied_ends(const StageModel& model);

// The gradient slots of a stage: one per parameter of its layout, and for a stage that holds both tied ends one
// more, the head's half of the tied matrix's gradient (zeros, f32, on `device`).
TensorSet gradient_slots(const StageModel& model, Device device);

// The slot the head's half goes to in `grads`, or -1 where `grads` has none (a stage without both tied ends, or
// slots made without it: then both halves add onto the embedding's slot as each backward goes).
int tied_head_slot(const StageModel& model, const TensorSet& grads);

// The gradients layer `layer` writes: `grads` itself, or for the head of a stage with a tied head slot, a view of
// `grads` whose tied matrix slot is that slot (`view` holds it).
TensorSet* layer_grads(const StageModel& model, size_t layer, TensorSet* grads, TensorSet& view);

// At the step, once both halves are summed: the embedding's slot += the head's slot (g = E + H), which is then
// zero. Nothing where `grads` has no tied head slot.
void add_tied_head_half(Ops& ops, const StageModel& model, TensorSet& grads);

}  // namespace nb

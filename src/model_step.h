// Running a whole (single-stage) model on one microbatch. The pipeline's StageRunner does the same per
// stage, with activations arriving from its neighbours instead of from the previous layer in this process.
#pragma once

#include "model/stage_model.h"

namespace nb {

// Forward and backward through every layer; parameter gradients accumulate into `grads`.
// Returns the microbatch's mean loss. `dloss` scales the objective (1 for a plain sum over microbatches).
float forward_backward(Ops& ops, const StageModel& model, const TensorSet& weights, TensorSet& grads,
                       const Microbatch& batch, float dloss = 1.0f);

// Forward only (evaluation): the microbatch's mean loss.
float forward_loss(Ops& ops, const StageModel& model, const TensorSet& weights, const Microbatch& batch);

}  // namespace nb

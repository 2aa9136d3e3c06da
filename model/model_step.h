// Running a model on one microbatch: a stage's slice of layers (the pipeline's StageRunner and the oracle run one
// stage at a time, with activations arriving from the neighbouring stage), and the whole single-stage model
// (`train`'s loop), which is the same slice run end to end.
#pragma once

#include <vector>

#include "model/recompute.h"
#include "model/stage_model.h"

namespace nb {

// Forward of the stage's layers in order, from `x`: the previous stage's output, undefined where the stage
// begins with the embedding. With `stashes`, keeps one Stash per layer for the backward (resized to fit); null
// runs forward only (evaluation). Returns the stage's output: the activation for the next stage, or, on the
// stage with the head, the microbatch's mean loss as a host [1] tensor. `recompute` (model/recompute.h): the blocks it
// selects keep only their group's input, and the backward below reruns their forward (the same bits).
Tensor stage_forward(const StageModel& model, const LayerContext& ctx, Tensor x, std::vector<Stash>* stashes,
                     const RecomputeConfig& recompute = {});

// Told during a backward, after each layer, that the layers from there to the end are done: gradient slots
// [first_param, layout size) hold what this call adds to them (StageModel::first_param). Lets the caller move
// those while the earlier layers still compute (the data-parallel sum of a step's last backward).
class GradsDoneObserver {
public:
    virtual ~GradsDoneObserver() = default;
    virtual void grads_done_from(int first_param) = 0;
};

// Backward of the stage's layers in reverse from `dy` (d objective / d output: the next stage's input gradient,
// or loss_gradient() on the stage with the head), accumulating parameter gradients into ctx.grads and freeing
// each stash as it is consumed. A recomputed group's forward reruns on ctx.weights, which must be the version its
// forward used. Returns d objective / d input (undefined on the stage with the embedding).
// With `peak_bytes`, sets it to the most the stashes held during the call (model/stash_bytes.h: read after each
// group's rerun and each layer), what a stage's meter counts on top of its other microbatches' stashes.
Tensor stage_backward(const StageModel& model, const LayerContext& ctx, Tensor dy, std::vector<Stash>& stashes,
                      GradsDoneObserver* done = nullptr, size_t* peak_bytes = nullptr);

// The same backward in two halves (zero-bubble schedules): stage_backward_input runs every layer's B in reverse
// and returns what stage_backward returns, leaving each layer's weight products in its stash;
// stage_backward_weight runs them, layer by layer in the same reverse order (so a tied embedding's two parts add
// in the fused order), and frees the stashes. The gradients come out bit for bit as stage_backward's.
Tensor stage_backward_input(const StageModel& model, const LayerContext& ctx, Tensor dy, std::vector<Stash>& stashes,
                            size_t* peak_bytes = nullptr);
// Both tell `done` as stage_backward does (B adds no parameter gradient, so it has nothing to tell).
void stage_backward_weight(const StageModel& model, const LayerContext& ctx, std::vector<Stash>& stashes,
                           GradsDoneObserver* done = nullptr);
// Bytes the stashes hold (what a microbatch between its forward and its W keeps alive on the stage).
size_t stash_bytes(const std::vector<Stash>& stashes);

// What the head's backward starts from: d(objective)/d(mean loss) as a host [1] tensor (1 for a plain sum over
// microbatches).
Tensor loss_gradient(float dloss = 1.0f);

// Forward and backward through every layer; parameter gradients accumulate into `grads`.
// Returns the microbatch's mean loss. `dloss` scales the objective (1 for a plain sum over microbatches). `moe`,
// when given, is told about every MoE dispatch (model/moe_load.h).
float forward_backward(Ops& ops, const StageModel& model, const TensorSet& weights, TensorSet& grads,
                       const Microbatch& batch, float dloss = 1.0f, MoeObserver* moe = nullptr,
                       const RecomputeConfig& recompute = {});

// Forward only (evaluation): the microbatch's mean loss.
float forward_loss(Ops& ops, const StageModel& model, const TensorSet& weights, const Microbatch& batch);

}  // namespace nb

// Gradient-norm clipping, as torch.nn.utils.clip_grad_norm_ (L2 norm over all gradients together):
//
//   norm      = sqrt(sum over tensors, in layout order, of sum(g^2))      accumulated in double
//   clip_coef = max_norm / (norm + 1e-6)
//   if max_norm > 0 and clip_coef < 1:  g <- g * (float)clip_coef   for every gradient
//
// max_norm <= 0 disables clipping (the norm is still computed, for logging). A non-finite norm (NaN or inf)
// leaves the gradients untouched and is returned as is: the caller decides (skip the step, stop the run).
//
// Across pipeline stages the norm needs the sums of squares of every stage. To keep the bits of the unsplit
// model, each stage contributes its per-parameter sums (param_sum_squares) rather than a subtotal, which would
// round differently, and every stage adds all of them one after the other in canonical order
// (total_sum_squares): param_sum_squares -> gather to every stage -> total_sum_squares -> sqrt ->
// clip_grads_to_norm.
#pragma once

#include <vector>

#include "model/params.h"
#include "src/ops/ops.h"

namespace nb {

// Buffers (ParamInfo::trainable() false: the expert bias, whose slot holds the step's loads) are no gradient: they
// count 0 in every sum, are never scaled, and are not averaged, so a run clips exactly as it would without them.

// sum(g^2) of every gradient tensor, in layout order, each accumulated in double: what a stage contributes (one
// value per parameter of `layout`, 0 for a buffer).
std::vector<double> param_sum_squares(Ops& ops, const ParamLayout& layout, const TensorSet& grads);

// THE ORDER RULE: the per-parameter sums added one after the other into one double starting from 0, stage by
// stage in the order given (stage 0's parameters first), each stage's in layout order. Over the stages of a
// cut this is exactly grad_sum_squares of the unsplit model, since the stage layouts concatenate to its layout.
double total_sum_squares(const std::vector<std::vector<double>>& per_stage);

// total_sum_squares of this process's gradients alone.
double grad_sum_squares(Ops& ops, const ParamLayout& layout, const TensorSet& grads);

// sqrt(grad_sum_squares): the global norm when all gradients are local.
double global_grad_norm(Ops& ops, const ParamLayout& layout, const TensorSet& grads);

// The factor the gradients are multiplied by: clip_coef when clipping applies, else 1.
double clip_coefficient(double norm, double max_norm);

// Scales every gradient by clip_coefficient(norm, max_norm) when it is < 1; `norm` computed by the caller.
void clip_grads_to_norm(Ops& ops, const ParamLayout& layout, TensorSet& grads, double norm, double max_norm);
// The same, but tensor 0 by `first_norm` (tied embeddings under --clip-scope stage: the last stage's copy of the
// matrix is clipped by the norm of the first stage, which holds it, as there; the rest by the stage's own).
void clip_grads_to_norms(Ops& ops, const ParamLayout& layout, TensorSet& grads, double norm, double first_norm,
                         double max_norm);

// global_grad_norm then clip_grads_to_norm; returns the norm before clipping.
double clip_grad_norm(Ops& ops, const ParamLayout& layout, TensorSet& grads, double max_norm);

// The step's summed gradients -> their mean over its `microbatches` (g *= 1/microbatches; nothing for one).
void average_grads(Ops& ops, const ParamLayout& layout, TensorSet& grads, int64_t microbatches);

}  // namespace nb

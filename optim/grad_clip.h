// Gradient-norm clipping, as torch.nn.utils.clip_grad_norm_ (L2 norm over all gradients together):
//
//   norm      = sqrt(sum over tensors, in layout order, of sum(g^2))      accumulated in double
//   clip_coef = max_norm / (norm + 1e-6)
//   if max_norm > 0 and clip_coef < 1:  g <- g * (float)clip_coef   for every gradient
//
// max_norm <= 0 disables clipping (the norm is still computed, for logging). A non-finite norm (NaN or inf)
// leaves the gradients untouched and is returned as is: the caller decides (skip the step, stop the run).
//
// Across pipeline stages the norm needs one all-reduce of the sums of squares; the pieces below let the
// caller put it in between: grad_sum_squares -> all-reduce -> sqrt -> clip_grads_to_norm.
#pragma once

#include "model/params.h"
#include "ops.h"

namespace nb {

// This process's share: sum over its tensors of sum(g^2), in layout order, in double.
double grad_sum_squares(Ops& ops, const TensorSet& grads);

// sqrt(grad_sum_squares): the global norm when all gradients are local.
double global_grad_norm(Ops& ops, const TensorSet& grads);

// The factor the gradients are multiplied by: clip_coef when clipping applies, else 1.
double clip_coefficient(double norm, double max_norm);

// Scales every gradient by clip_coefficient(norm, max_norm) when it is < 1; `norm` computed by the caller.
void clip_grads_to_norm(Ops& ops, TensorSet& grads, double norm, double max_norm);

// global_grad_norm then clip_grads_to_norm; returns the norm before clipping.
double clip_grad_norm(Ops& ops, TensorSet& grads, double max_norm);

}  // namespace nb

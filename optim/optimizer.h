// Optimizer: the interface every per-stage optimizer implements (AdamW, Muon, Lion, Adan, MARS, SOAP; each in its
// own file here, built by optim/make_optimizer.h, and wrapped with the delay fix by optim/stage_optimizer.h).
//
// An optimizer owns its state (moments, momentum buffers, preconditioners) as tensors per parameter of the
// stage's ParamLayout (optim/optimizer_state.h), so the state lives next to the weights it updates and is easy
// to account for and to save.
// It does not own weights or gradients: the stage passes them in, already clipped, at each step.
//
//   weights <- update(weights, grads, state, lr, t)      t = steps_taken() + 1 during the step
//
// The learning rate comes from outside (optim/lr_schedule.h) so every optimizer follows the same schedule.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "model/params.h"
#include "src/ops/ops.h"
#include "src/core/tensor.h"

namespace nb {

class Optimizer {
public:
    virtual ~Optimizer() = default;

    // Short lower-case name as on the command line, e.g. "adamw".
    virtual std::string name() const = 0;

    // One update of every parameter of `layout`; `weights` and `grads` follow the layout. `lr` is this step's
    // learning rate (already scheduled). Kinds matter: each optimizer reads ParamInfo (weight decay, Muon's
    // hidden matrices) to decide how to treat a parameter.
    virtual void step(Ops& ops, const ParamLayout& layout, TensorSet& weights, const TensorSet& grads, float lr) = 0;

    // Steps completed so far: 0 before the first step; the first step runs with t = 1 (as torch).
    virtual int64_t steps_taken() const = 0;
    // A resumed run's count (its state tensors' contents restored beside it); std::logic_error when negative.
    virtual void restore_steps_taken(int64_t steps) = 0;

    // Every state tensor, named "<state>.<param name>" (e.g. "exp_avg.layers.0.attn.wq"), in a fixed order:
    // state by state, each in layout order. The pointers stay valid for the optimizer's lifetime; a checkpoint
    // writes them, a resume reads into them.
    virtual std::vector<std::pair<std::string, Tensor*>> state_tensors() = 0;
};

}  // namespace nb

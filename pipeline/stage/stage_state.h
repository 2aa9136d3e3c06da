// StageState: one pipeline stage as data (docs/DESIGN.md section 1, "A stage is data"): its slice of the model, its f32
// master weights (the newest version), the sum of its gradients over the current step, and its optimizer and
// delay-mitigation state. Every training loop builds its stages with this one constructor: the plain loop (one
// stage holding the whole model), each StageRunner of the executor, and each stage of the oracle.
//
// The weight versions a schedule computes with are kept beside it by whoever runs the schedule
// (pipeline/stage/weight_versions.h in the executor, pipeline/stage/weight_history.h in the oracle, which must reach them by
// its own rule), and the gradients are work in flight (zeroed as each step begins): neither is part of
// state_tensors(), the state that carries from one step to the next.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "model/stage_model.h"
#include "optim/optimizer_shards.h"
#include "optim/stage_optimizer.h"
#include "src/plan/train_options.h"

namespace nb {

struct StageState {
    // The stage `spec` of --model, initialised from --seed (per parameter name: the same values for any cut),
    // with the optimizer and mitigation of the options. UsageError for a bad optimizer configuration.
    StageState(const TrainOptions& options, const StageSpec& spec, Device device);
    // With `owned` (the distributed optimizer's shards of this replica, optim/optimizer_shards.h): the optimizer
    // and the mitigation cover only those rows of those tensors; weights and gradients stay whole.
    StageState(const TrainOptions& options, const StageSpec& spec, Device device, std::vector<TensorShard> owned);

    StageModel model;
    TensorSet master;
    TensorSet grads;
    std::vector<TensorShard> owned;  // what the optimizer steps (every tensor whole unless sharded)
    ParamLayout optimizer_layout;    // its layout: the owned rows' shapes, the parameters' names
    StageOptimizer optimizer;

    bool sharded() const { return sharded_; }
    // The tensors of `set` (over the model's layout) the optimizer steps: `set` itself, or views of the owned rows.
    TensorSet optimizer_view(const TensorSet& set) const;
    // An optimizer state tensor of a whole stage (as a file holds it, "<state>.<parameter>") cut to the rows this
    // replica owns of its parameter; `saved` itself where it owns them all or `name` is not the optimizer's.
    Tensor own_rows(const std::string& name, const Tensor& saved) const;

    // Every tensor that carries from step to step, by canonical name, in canonical order: the master weights
    // ("weights.<parameter>", layout order), then the optimizer's and the mitigation's state (their own names,
    // e.g. "exp_avg.layers.0.attn.wq", StageOptimizer::state_tensors). The two fingerprints hash these, in this
    // order (pipeline/stage/state_hash.h).
    std::vector<std::pair<std::string, Tensor*>> state_tensors();

private:
    bool sharded_ = false;
};

}  // namespace nb

// StageStep: a pipeline stage's state (pipeline/stage/stage_state.h) and the optimizer step that changes it, for
// StageRunner (pipeline/stage/stage_runner.h), which computes the gradients and tells it when one is added:
//
//   gradient sum   every backward (or W) adds onto state().grads; the step's last one, with D > 1 replicas,
//                  begins the sum over them (replica_observer(): pipeline/transport/replica_sum.h, in replica
//                  order, the oracle's bits), bucket by bucket while its layers compute;
//   step           once that sum has come: scale by 1/(D m) (m > 1; pipedream steps on single microbatches), clip
//                  by the norm of --clip-scope (global: the per-parameter sums of squares of every stage,
//                  all-gathered and added in canonical order, optim/grad_clip.h; stage: this stage's own), then the
//                  stage's optimizer (optim/stage_optimizer.h: --optimizer, with --delay-fix on asynchronous steps;
//                  taylor reads the stale version first, which is then let go) at the learning rate of the step,
//                  making the next weight version;
//   tied halves    with tied embeddings, the two halves of the shared matrix's gradient, each summed on its own,
//                  are added before the step (model/tied_head_grad.h on a stage that holds both ends;
//                  pipeline/stage/tied_gradient.h between the first and the last of several), and the copy on the
//                  last stage counts once in the norms;
//   shards         with --use-distributed-optimizer, the optimizer steps only this replica's rows and the other
//                  owners' updated rows come back (pipeline/stage/shard_exchange.h) before the step completes;
//                  the whole optimizer state is gathered on replica 0 for a checkpoint and the end.
//
// try_step() does what it can and returns false while it waits (the replica sum, the clip's all-gather, the
// owners' rows); it is called again until it returns true.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "model/model_step.h"
#include "optim/lr_schedule.h"
#include "pipeline/schedule/pipeline_setup.h"
#include "pipeline/stage/fault_injection.h"
#include "pipeline/stage/replica_grad_sum.h"
#include "pipeline/stage/shard_exchange.h"
#include "pipeline/stage/stage_meter.h"
#include "pipeline/stage/stage_state.h"
#include "pipeline/stage/tied_gradient.h"
#include "pipeline/stage/weight_versions.h"
#include "pipeline/transport/transport.h"

namespace nb {

class StageStep {
public:
    // `replicas` and `replica_sum` as StageRunner's constructor takes them; `meter` and `faults` must outlive it.
    StageStep(const PipelineSetup& setup, int stage, Transport& transport, Ops& ops, Transport* replicas,
              std::unique_ptr<ReplicaSum> replica_sum, StageMeter& meter, const FaultPlan& faults);
    ~StageStep();
    StageStep(const StageStep&) = delete;
    StageStep& operator=(const StageStep&) = delete;

    StageState& state() { return state_; }
    const StageState& state() const { return state_; }

    // Before the backward (or W) of `step` that adds a gradient: with replicas, where it is the step's last, the
    // replica sum begins and the returned observer feeds it layer by layer; null otherwise.
    GradsDoneObserver* replica_observer(int64_t step);
    // One more microbatch's gradient is in the step's sum.
    void gradient_added();

    // The optimizer step `a` (its weights from and into `versions`): true once done, false while it waits.
    bool try_step(const Action& a, WeightVersions& versions);
    // Whether the current step has begun (averaged its gradient, contributed to the norm) and not completed.
    bool begun() const { return begun_; }
    // What the optimizer step at the front of the list waits for (the replica sum, the owners' rows, the clip's
    // all-gather), nullopt if nothing.
    std::optional<std::string> waits_for() const;
    // Whether this stage holds the copy of a tied matrix (the last of several stages): not written to checkpoints.
    bool holds_tied_copy() const { return tied_.holds_copy(); }
    // The per-parameter sums of squares of the last step made, for the report.
    const std::vector<double>& reported_sums() const { return reported_sums_; }

    // The stage's whole optimizer state in canonical order (for its file and its hash): its own, or with the
    // distributed optimizer, on replica 0 once the other owners' tensors have come (`key` names the gather).
    std::optional<std::vector<std::pair<std::string, const Tensor*>>> whole_optimizer_state(int64_t key);
    // Replica r > 0 with the distributed optimizer: its shards' state to replica 0 for gather `key`.
    void send_state(int64_t key);

private:
    class ReplicaSumFeed;

    bool replicas_summed();
    bool tied_halves_added(const Action& a);
    void begin(const Action& a);
    std::optional<double> clip_norm(const Action& a);
    void update(const Action& a, WeightVersions& versions);
    void complete(const Action& a, WeightVersions& versions);

    const PipelineSetup& setup_;
    const TrainOptions& o_;
    Transport& transport_;
    Ops& ops_;
    StageMeter& meter_;
    const FaultPlan& faults_;
    std::unique_ptr<ReplicaSum> replica_sum_;  // D > 1: the gradient's sum over the replicas
    std::unique_ptr<ReplicaSumFeed> feed_;
    std::vector<TensorShard> shard_plan_;  // --use-distributed-optimizer: every replica's shards (else empty)
    StageState state_;                     // the slice of the model, master weights, gradient sum, optimizer state
    std::unique_ptr<ShardExchange> shards_;  // --use-distributed-optimizer: weights and state between the owners
    LrSchedule lr_;
    TiedGradient tied_;  // tied embeddings, first or last of several stages: the other end's half

    int64_t accumulated_ = 0;          // backwards in the current step's gradient sum
    bool tied_sent_ = false;           // the current step has sent its tied half and waits for the other end's
    bool begun_ = false;               // the current step has averaged its gradient and waits for its clip norm
    bool weights_pending_ = false;     // ... has updated its own tensors and waits for the owners'
    std::vector<double> step_sums_;    // per-parameter sums of squares of the current step
    std::vector<double> reported_sums_;  // ... of the last step made, for the report
    std::optional<double> norm_;       // the current step's own clip norm, once known
};

}  // namespace nb

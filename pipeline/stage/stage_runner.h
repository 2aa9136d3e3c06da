// StageRunner: one pipeline stage, running its tasks (pipeline/stage/stage_tasks.h: the schedule's actions plus
// evaluation, reports and the finish) as an event loop (docs/DESIGN.md section 1, "The executor is event-driven").
//
// It owns the stage's slice of the model (model/stage_model.h), its f32 master weights, the weight versions the
// schedule says it holds (pipeline/stage/weight_versions.h), its gradient sum and optimizer state, the stashes of the
// microbatches in flight, and its own readers of the training and validation data. The schedule decides what
// runs when; the runner only checks that it can: try_advance() runs the next task when what it needs has
// arrived, and otherwise returns false at once. Receives of the next few tasks are posted before that, so
// messages land while the stage computes; sends return at once. Two drivers use it (src/run/pipeline_driver.h):
// one runner per MPI rank, waiting on its transport when blocked, or P runners in one thread, round-robin.
//
// The arithmetic is the oracle's (src/run/reference.h), reached independently from the action list:
//   forward/backward  with the version the action names, the weights of microbatches in flight stashed;
//   accumulation      every backward (or, split, every W) adds onto the step's gradient sum; backwards, B and W
//                     each come in microbatch order (std::logic_error otherwise), so the sum is the oracle's, bit
//                     for bit (model/weight_grads.h: B + W give the fused backward's bits);
//   replicas          with D > 1 data-parallel replicas, replica r reads microbatches [r m, (r+1) m) of every global
//                     batch of D m; once the step's last backward (or W) has added its gradient, the sum over the
//                     replicas starts (pipeline/stage/replica_grad_sum.h: in replica order, the oracle's bits) and
//                     the step waits for it; only replica 0 evaluates, reports to stage 0 (with the other
//                     replicas' loss sums and MoE loads added in replica order), saves and sends its finals;
//   optimizer step    scale by 1/(D m) (m > 1; pipedream steps on single microbatches), clip by the norm of
//                     --clip-scope (global: the per-parameter sums of squares of every stage, all-gathered and
//                     added in canonical order, optim/grad_clip.h; stage: this stage's own), then the stage's
//                     optimizer (optim/stage_optimizer.h: --optimizer, with --delay-fix on asynchronous steps;
//                     taylor reads the stale version first, which is then let go) at the learning rate of the
//                     step (the schedule counts optimizer steps), making the next version.
//
// Checkpoints (docs/DESIGN.md section 8): resumed, the runner starts at setup.first_iteration with its state restored
// (restore(), before the run); with --save its save task writes the stage's file after the update that ends a
// save iteration (its state, the older weight versions it holds) and tells stage 0, which completes the
// manifest. No stage waits for a flush: work in flight at a checkpoint is redone on resume from the same
// versions. The stages agree on an early stop (a signal) by their StopVote (pipeline/stage/stop_vote.h), and a stage
// starts nothing of an iteration, not even a posted receive, before it knows that the iteration runs.
//
// It runs and does not measure: its StageMeter (pipeline/stage/stage_meter.h) does, told by the runner when a try of
// a task starts, when the task ran or was blocked, when a microbatch's stashes are added and released, and
// asked for the measured fields of each report (busy and wall time, the most bytes of activation stashes held)
// and of the finish (the same over the run, and with --trace every timed record, sent to stage 0 for the trace
// file). What the stage computes, the last stage's loss sums and its MoE blocks' loads (pipeline/
// stage_moe_observer.h) for its reports included, stays here; timing never changes it.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/moe_load.h"
#include "model/stage_model.h"
#include "optim/lr_schedule.h"
#include "pipeline/schedule/pipeline_setup.h"
#include "pipeline/stage/compute_turns.h"
#include "pipeline/stage/replica_grad_sum.h"
#include "pipeline/stage/shard_exchange.h"
#include "pipeline/stage/stage_report.h"
#include "pipeline/stage/stage_clock.h"
#include "pipeline/stage/stage_meter.h"
#include "pipeline/stage/stage_state.h"
#include "pipeline/stage/stage_tasks.h"
#include "pipeline/stage/stop_vote.h"
#include "pipeline/transport/transport.h"
#include "pipeline/stage/weight_versions.h"
#include "src/plan/train_data.h"

namespace nb {

class StageRunner {
public:
    // The stage's plan is setup.plans[stage]. Opens the data (RuntimeError naming the file when it cannot).
    // `setup`, `transport` and `ops` must outlive the runner. `replicas`: with --data-parallel-size D > 1, the
    // transport among this stage's D replicas (its stage() is this runner's replica), else null; `replica_sum`:
    // how the gradient is summed over them (the NCCL sum on GPUs), null for messages over `replicas`.
    StageRunner(const PipelineSetup& setup, int stage, Transport& transport, Ops& ops, Transport* replicas = nullptr,
                std::unique_ptr<ReplicaSum> replica_sum = nullptr);

    // Runs the next task if what it needs is there (a receive has arrived; the all-gather of a global clip has
    // completed) and returns true; returns false when it is blocked or done. Receives of the next kLookahead
    // tasks are posted first. Errors: RuntimeError (data, a non-finite loss with --stop-on-nan, the injected
    // --fail-at-step fault), std::logic_error (a plan that breaks the runtime's rules). The injected
    // --stall-at-step never returns.
    bool try_advance();
    // Times from now on count from `origin`, the same for every stage (the drivers call it once, just before
    // the run; by default the clock starts when the runner is made).
    void start_clock(StageClock::Clock::time_point origin);
    bool done() const { return window_.empty(); }
    // What the runner does next, e.g. "recv_gradient mb 3 from stage 1", and what it waits for where that does
    // not say (the all-gather of a global clip, an evaluation's input): for deadlock and watchdog reports.
    std::string next_task() const;

    // Before the run, resuming: the stage's tensors from its checkpoint files (by name, any stage cut), the
    // optimizer's step count and the training data's position at setup.first_iteration. Checks before it changes
    // anything (RuntimeError naming `source`).
    void restore(const std::map<std::string, const Tensor*>& saved, int64_t steps_taken, LoaderPosition data,
                 const std::string& source);
    // With several chunks on this rank: compute only in `turns`'s order (pipeline/stage/compute_turns.h), which must
    // outlive the runner. Without: each compute as soon as this runner's own list allows.
    void follow_turns(ComputeTurns& turns) { turns_ = &turns; }
    // The stages' agreement on where the run stops (stage 0's collector follows it).
    const StopVote& stop_vote() const { return vote_; }

    int stage() const { return stage_; }
    int replica() const { return replica_; }
    int64_t train_windows() const { return data_->train->num_windows(); }
    int peak_versions() const { return versions_.peak_held(); }

    static constexpr size_t kLookahead = 16;

private:
    // A microbatch between its forward and its backward on this stage.
    struct InFlight {
        Microbatch batch;
        std::vector<Stash> stashes;
        size_t stash_bytes = 0;
        bool input_done = false;  // a split backward's B has run; its W has not
    };

    void post_receives_ahead();
    void inject_fault(const StageTask& task);
    bool kill_asked(KillPoint point) const;                 // test-only --kill-during
    void die_if_asked(KillPoint point, int64_t step) const;  // ... at --kill-at-step
    bool run(const StageTask& task);
    bool run_action(const Action& a);
    bool receive(const Action& a, std::map<int64_t, Tensor>& into);
    void send(const Action& a, std::map<int64_t, Tensor>& from);
    void forward(const Action& a);
    void backward(const Action& a, bool input_only);  // the fused backward, or B of a split one
    void backward_weight(const Action& a);
    void gradient_added();
    bool last_gradient_of_step() const;
    int64_t data_microbatch(int64_t microbatch) const;
    bool merge_replica_reports(StageReport& r);
    bool optimizer_step(const Action& a);
    void begin_step(const Action& a);
    std::optional<double> clip_norm(const Action& a);
    void finish_step(const Action& a, double norm);
    void complete_step(const Action& a);
    std::optional<std::vector<std::pair<std::string, const Tensor*>>> whole_optimizer_state(int64_t key);
    bool evaluate(const StageTask& task);
    bool report(const StageTask& task);
    void post_replica_reports(int64_t iteration);
    MessageTag replica_report_tag(int64_t iteration) const;
    bool finish();
    bool replicas_agree();
    bool vote(const StageTask& task);
    bool save(const StageTask& task);
    bool gate(const StageTask& task);
    // The iteration whose stop vote `task` waits for: its own, or for a save the next one (gate()).
    int64_t gated_iteration(const StageTask& task) const;
    void drop_tasks_after_stop();
    void fill_window();
    void task_done();

    MessageTag tag_of(const Action& a) const;
    int64_t iteration_of_microbatch(int64_t microbatch) const;

    const PipelineSetup& setup_;
    const TrainOptions& o_;
    const int stage_;
    const bool first_, last_;  // holds the embedding / the head
    Transport& transport_;
    Ops& ops_;
    // Data parallelism (D > 1): the transport among the stage's replicas, and the sum of its gradients over them.
    Transport* replicas_;
    const int replica_;
    const int fault_rank_;  // what the test-only --*-rank flags name: replica x stages + stage
    std::unique_ptr<ReplicaSum> replica_sum_;
    std::vector<TensorShard> shard_plan_;  // --use-distributed-optimizer: every replica's shards (else empty)

    StageState state_;  // the slice of the model, master weights, gradient sum, optimizer state
    std::unique_ptr<ShardExchange> shards_;  // --use-distributed-optimizer: weights and state between the owners
    LrSchedule lr_;
    WeightVersions versions_;
    std::unique_ptr<TrainData> data_;
    MicrobatchReader train_reader_, val_reader_;

    StopVote vote_;
    StageTasks tasks_;               // made as they are needed, a few ahead of the one that runs
    std::deque<StageTask> window_;   // the next tasks: the front runs next; at least kLookahead + 1 unless the last
    size_t posted_ = 0;              // receives of the first `posted_` tasks of the window are posted
    bool tasks_dropped_ = false;  // the tasks after an agreed early stop are gone
    ComputeTurns* turns_ = nullptr;  // the rank's order of its chunks' computes, when it has several

    std::map<int64_t, InFlight> in_flight_;      // by microbatch
    std::map<int64_t, Tensor> activations_in_;   // received, waiting for their forward
    std::map<int64_t, Tensor> gradients_in_;     // received, waiting for their backward
    std::map<int64_t, Tensor> activations_out_;  // computed, waiting for their send
    std::map<int64_t, Tensor> gradients_out_;

    // Microbatches in order: forwards (data order), backwards or B, and W (the accumulation order under zb-h1).
    int64_t next_forward_ = 0, next_backward_ = 0, next_weight_ = 0;
    int64_t accumulated_ = 0;                       // backwards in the current step's gradient sum
    bool step_begun_ = false;                       // the current optimizer step waits for its clip norm
    bool weights_pending_ = false;                  // ... has updated its own tensors and waits for the owners'
    std::vector<double> step_sums_;                 // per-parameter sums of squares of the current step
    std::vector<double> reported_sums_;             // ... of the last step made, for the report

    StageMeter meter_;  // its time, waits and stash bytes; the runner only tells it what ran

    std::map<int64_t, double> loss_sums_;         // last stage: per iteration, microbatch losses added in order
    std::map<int64_t, MoeLoadCounter> moe_loads_;  // per iteration, the stage's MoE blocks' training forwards
    std::optional<StageReport> pending_report_;   // made, not yet sent (replica 0 waits for the others')
    std::vector<std::optional<std::vector<double>>> replica_reports_;  // replica 0: what the others sent
    bool replicas_agreed_ = false;                // the end's check of the replicas' weights is done
    double val_loss_sum_ = 0;                     // last stage: the running evaluation
    std::optional<int64_t> evaluated_iteration_;  // last stage: the iteration whose evaluation val_loss_sum_ is
};

}  // namespace nb

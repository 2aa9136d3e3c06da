// StageRunner: one pipeline stage, running its tasks (pipeline/stage/stage_tasks.h: the schedule's actions plus
// evaluation, reports and the finish) as an event loop (docs/DESIGN.md section 1, "The executor is event-driven").
//
// It owns the stage's step (its slice of the model, f32 master weights, gradient sum and optimizer state), the
// weight versions the schedule says it holds (pipeline/stage/weight_versions.h), the stashes of the microbatches in
// flight, and its own readers of the training and validation data. The schedule decides what
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
//                     batch of D m; only replica 0 evaluates, reports to stage 0, saves and sends its finals;
//   optimizer step    its StageStep (pipeline/stage/stage_step.h): the stage's state, the sum over the replicas,
//                     the clip, the optimizer and the distributed optimizer's shards;
//   reports           its StageEvaluation (pipeline/stage/stage_evaluation.h): loss sums, MoE loads, evaluation,
//                     the reports to stage 0 and the replicas' check at the end.
// The test-only faults that the fault tests ask of this rank are its FaultPlan (pipeline/stage/fault_injection.h).
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
// stage_moe_observer.h) for its reports included, stays out of it; timing never changes it.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/stage_model.h"
#include "pipeline/schedule/pipeline_setup.h"
#include "pipeline/stage/compute_turns.h"
#include "pipeline/stage/fault_injection.h"
#include "pipeline/stage/stage_clock.h"
#include "pipeline/stage/stage_evaluation.h"
#include "pipeline/stage/stage_meter.h"
#include "pipeline/stage/stage_step.h"
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
    bool run(const StageTask& task);
    bool run_action(const Action& a);
    bool receive(const Action& a, std::map<int64_t, Tensor>& into);
    void send(const Action& a, std::map<int64_t, Tensor>& from);
    void forward(const Action& a);
    void backward(const Action& a, bool input_only);  // the fused backward, or B of a split one
    void backward_weight(const Action& a);
    int64_t data_microbatch(int64_t microbatch) const;
    bool finish();
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
    // Data parallelism (D > 1): the transport among the stage's replicas.
    Transport* replicas_;
    const int replica_;
    const FaultPlan faults_;  // what the test-only fault flags ask of this rank
    StageMeter meter_;        // its time, waits and stash bytes; the runner only tells it what ran

    StageStep step_;  // the state (model slice, master weights, gradient sum, optimizer) and the optimizer step
    WeightVersions versions_;
    std::unique_ptr<TrainData> data_;
    MicrobatchReader train_reader_;
    StageEvaluation evaluation_;  // loss sums, MoE loads, evaluation and the reports

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
};

}  // namespace nb

// `nobubble reference`: the independent single-process oracle for the pipeline schedules (docs/DESIGN.md section 2,
// "The oracle"). The pipeline executor, run on p processes, must end with the same bits as this.
//
// It implements the table of docs/DESIGN.md section 2 directly, and nothing else: the whole model in one process as p
// StageModels (the cut of model/partition.h), each with its own f32 master weights, gradients and optimizer state,
// and an explicit WeightHistory of the versions each stage still needs. No schedule action lists, no executor, no
// transport: for every optimizer step the version each stage computes with comes from the formula alone
// (weight_version below), each microbatch runs forward through stage 0..p-1 and backward through p-1..0, and then
// every stage steps. Running microbatches one after the other is exact: under every schedule a microbatch depends on
// the others only through the weight versions it reads.
//
// One optimizer step t (t counts steps from 0; W_v is a stage's weights after v steps):
//   1. zero every stage's gradients;
//   2. for each of the step's microbatches, in microbatch order: forward through every stage s with
//      W_{weight_version(kind, s, p, t)}, backward through every stage with the same weights, each stage's
//      parameter gradients accumulating (+=) onto its running sum;
//   3. scale the gradients by 1/n, n = the step's microbatch count (m; pipedream: 1), when n > 1;
//   4. clip (--clip-scope, see "Clipping" in reference.cpp);
//   5. every stage's optimizer (--optimizer, with --delay-fix on asynchronous steps: optim/stage_optimizer.h)
//      steps its master weights at lr = LrSchedule(--lr..., optimizer steps).lr_at(t), making W_{t+1}; taylor
//      compensates the gradient with the version it was computed at first. The history then drops the versions
//      no later step will use and adds W_{t+1}.
// Data: microbatch i of iteration t is the (t*m + i)-th batch of the trainer's loader (src/plan/train_data.h), so a
// synchronous schedule is `nobubble train` with the model cut into stages: the same bits, for any p.
// Data parallelism (--data-parallel-size D): an iteration reads D m microbatches, replica r's being the
// (t D m + r m + i)-th; in step 2 each replica sums its own microbatches' gradients, the stages add the replicas'
// sums in replica order (optim/replica_grads.h), and step 3 scales by 1/(D n).
// Evaluation: forward only, every stage with its newest version.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "src/plan/run_plan.h"
#include "src/run/trainer.h"

namespace nb::reference {

// The oracle's own names for the schedules (deliberately not pipeline/schedule/schedule.h: its rules are what is checked).
enum class Schedule { gpipe, one_f_one_b, two_bw, pipedream };

// The plan's --schedule (parsed once, at the command line) as the oracle names it.
Schedule oracle_schedule(ScheduleKind kind);
// 2bw and pipedream: gradients computed on stale weights, stages stepping at different times.
bool is_asynchronous(Schedule schedule);

// An iteration always consumes m microbatches; pipedream makes each of them an optimizer step of its own.
//   microbatches per step: m (pipedream: 1)        optimizer steps in T iterations: T (pipedream: T*m)
// The LR schedule counts optimizer steps (so --lr-warmup-iters and --lr-decay-iters do too).
int64_t microbatches_per_step(Schedule schedule, int64_t microbatches);
int64_t optimizer_steps(Schedule schedule, int64_t iterations, int64_t microbatches);

// The optimizer steps an asynchronous schedule runs synchronously: the first `start` (--sync-start) and the last
// `cooldown` (--sync-cooldown) of its `total` steps. Both 0: none.
struct SyncSteps {
    int64_t start = 0, cooldown = 0, total = 0;
};

// A synchronous step: every step of gpipe and 1f1b; the --sync-start and --sync-cooldown steps of 2bw and
// pipedream. It computes its gradient at W_t and updates plainly (no --delay-fix).
bool is_synchronous_step(Schedule schedule, int64_t step, const SyncSteps& sync);

// THE VERSION RULE: the weight version W_v that stage `stage` of `num_stages` (p) computes optimizer step
// `step`'s gradient with, for the forward and the backward alike (docs/DESIGN.md section 2):
//   a synchronous step   v = t                          g_t = grad F_t(W_t)
//   2bw                  v = max(t - 1, 0)              on every stage: g_t = grad F_t(W_{max(t-1,0)})
//   pipedream            v = max(K, i - (p - 1 - s))    i = the microbatch = the step; stage s lags p-1-s steps;
//                                                       K = --sync-start, the first asynchronous step
// After --sync-start the asynchronous rule holds "as if it had always": 2bw's first asynchronous step K already
// uses W_{K-1}. It never decreases as `step` grows (the history relies on that to drop old versions).
int64_t weight_version(Schedule schedule, int stage, int num_stages, int64_t step, const SyncSteps& sync = {});
// The updates made while an asynchronous step's version is in use, t - v above away from the edges: 2bw 1,
// pipedream p-1-s. --delay-fix predict extrapolates the version by that many updates. std::logic_error for a
// synchronous schedule.
int64_t updates_in_flight(Schedule schedule, int stage, int num_stages);


struct ReferenceSummary {
    TrainSummary run;                  // run.steps counts optimizer steps (pipedream: iterations * m)
    std::string optimizer_sha256;      // SHA-256 of every stage's optimizer and delay-fix state in their canonical
                                       // order (StageOptimizer::state_tensors): stage 0's, then stage 1's, ...
    std::vector<int64_t> peak_versions;  // per stage: the most weight versions its history held at once
};

// Trains as described above, printing progress lines (and --metrics records) per iteration like `train`.
// For pipedream an iteration's line reports the mean loss of its m microbatches and the lr and gradient norm
// of its last optimizer step. The reported grad_norm is always the global norm, whatever --clip-scope.
ReferenceSummary run_reference(const RunPlan& plan, std::FILE* log);

}  // namespace nb::reference

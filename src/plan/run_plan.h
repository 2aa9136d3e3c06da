// RunPlan: a run's options once every rule between the flags has held, with what follows from them (the
// schedule's size and step counts, the stage cut). make_run_plan is the one place those rules are written;
// `train` (the plain loop and the pipeline), `reference` and `bench schedules` each take the plan it returns,
// and every MPI rank computes the same one from the same command line (so a bad one is rejected identically
// everywhere, before any training or communication).
#pragma once

#include <vector>

#include "model/stage_model.h"
#include "src/plan/schedule_spec.h"
#include "src/plan/train_options.h"

namespace nb {

struct RunPlan {
    TrainOptions options;
    ScheduleSpec schedule;       // kind, P = options.stages, m, T iterations, the synchronous steps
    std::vector<StageSpec> cut;  // what each (virtual) stage holds: P x V parts (choose_pipeline_cut: src/plan/pipeline_cut.h)

    // An iteration consumes m microbatches: one optimizer step (gpipe, 1f1b, 2bw) or m of them (pipedream).
    int64_t optimizer_steps() const { return schedule.optimizer_steps(); }
};

// The plan of `options`, or the first rule it breaks as a UsageError (one line naming the flag), checked in this
// order: each flag's own range (first the run's shape, check_run_shape: B, m, T, P, D, V >= 1, as `train` checks
// it before it fits the stages to the MPI ranks; then the model's shape, --data, the other sizes and counts, the LR
// schedule counted in optimizer steps, which pipedream makes m per iteration, the optimizer's hyperparameters,
// --taylor-lambda); the tokenizer (with llm.c shards only, its ids within the model's --vocab-size); the schedule's
// size (2bw needs m >= P; --sync-start/--sync-cooldown >= 0 and together at most the optimizer steps); a
// --clip-scope that fits the schedule; the mitigations
// (--delay-fix ef/taylor with 2bw only, --sync-start/--sync-cooldown with 2bw or pipedream only); the test-only
// fault flags; last the cut (choose_pipeline_cut, its stages within `fits`: --stages at most the layers, a
// --pipeline-layout that matches), so that a bad flag is said before the cut asks what memory there is.
RunPlan make_run_plan(const TrainOptions& options, const StageFits& fits = {});

// Checkpoints and stops, counted in iterations (the t of DIR/step_<t>; docs/DESIGN.md section 8), the one rule every
// loop follows:
//   end_iteration    a run that starts after `first` iterations ends at T, or earlier at the next multiple of
//                    --exit-interval
//   checkpoint_due   with --save, a checkpoint after `done` iterations when `done` is a multiple of
//                    --save-interval, the run's last (T), or where it ends early (`end`); never without --save
int64_t end_iteration(const TrainOptions& options, int64_t first);
bool checkpoint_due(const TrainOptions& options, int64_t done, int64_t end);

}  // namespace nb

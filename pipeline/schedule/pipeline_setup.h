// PipelineSetup: what every stage of one pipeline run agrees on before it starts, computed from the run's
// validated plan alone (src/plan/run_plan.h, which has already rejected a bad command line identically on every
// rank), so that every rank computes the same one before any training or communication.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "model/stage_model.h"
#include "pipeline/schedule/action_stream.h"
#include "pipeline/schedule/schedule.h"
#include "src/plan/run_plan.h"
#include "pipeline/schedule/version_uses.h"
#include "src/plan/train_options.h"

namespace nb {

struct PipelineSetup {
    TrainOptions options;
    // With V > 1 chunks per rank a "stage" here is a virtual stage, one of the P x V parts of the model (which chunk
    // of which rank: spec.placement()): each has its own runner, state and plan, and the runtime above the transport
    // sees P x V stages (src/run/mpi_driver.cpp runs a rank's V of them). With V = 1 a stage is a rank.
    ScheduleSpec spec;                 // kind, P = options.stages, m, T iterations, V
    std::vector<StageSpec> cut;        // partition_model: what each (virtual) stage holds
    // Tests only: a (virtual) stage that runs this list (from first_iteration) instead of the schedule's.
    std::map<int, StagePlan> fixed_plans;
    std::vector<ParamLayout> layouts;  // per stage: its parameters, in canonical order
    // Iterations [first_iteration, end_iteration) run: a resumed run starts after its checkpoint's iteration,
    // and --exit-interval ends it early (a signal may end it earlier still: pipeline/stage/stop_vote.h).
    int64_t first_iteration = 0;
    int64_t end_iteration = 0;

    // A checkpoint after iteration `iteration` (0-based): checkpoint_due (src/plan/run_plan.h) of iteration + 1
    // in this run (a stop the stages agree on while running adds one more: the runner's).
    bool saves_after(int64_t iteration) const;

    // Parameter tensors per stage (what each contributes to a gather of per-parameter sums).
    std::vector<int64_t> param_tensor_counts() const;

    // What (virtual) stage `stage` runs in order, iterations [first_iteration, end_iteration), made as it is asked
    // for (pipeline/schedule/action_stream.h): the schedule's list, or its fixed_plans entry.
    std::unique_ptr<ActionSource> stage_actions(int stage) const;
    // What rank `rank` runs, its chunks' actions merged (the order its chunks take turns in).
    std::unique_ptr<ActionSource> rank_actions(int rank) const;
    // How often (virtual) stage `stage` uses each weight version (version_uses.h): by the schedule's rules, or
    // counted off its fixed_plans entry.
    VersionUses version_uses(int stage, bool optimizer_reads_stale) const;
    // stage_actions(stage) whole (tests, and small runs).
    StagePlan stage_plan(int stage) const;
    int64_t first_step() const { return first_iteration * steps_per_iteration(); }
    int64_t end_step() const { return end_iteration * steps_per_iteration(); }

    int num_stages() const { return spec.virtual_stage_count(); }  // P x V
    int num_ranks() const { return spec.stages; }                  // P
    int chunks_per_rank() const { return spec.chunks_per_rank(); }  // V (zb-v: 2)
    int stage_of_chunk(int rank, int chunk) const { return spec.placement().part(rank, chunk); }
    int rank_of_stage(int stage) const { return spec.placement().rank_of(stage); }
    // An iteration consumes m microbatches: one optimizer step (gpipe, 1f1b, 2bw) or m of them (pipedream).
    int64_t steps_per_iteration() const { return spec.microbatches / spec.microbatches_per_step(); }
    int64_t iteration_of_step(int64_t step) const { return step / steps_per_iteration(); }
    bool ends_iteration(int64_t step) const { return (step + 1) % steps_per_iteration() == 0; }
    // Rows (tokens) of one microbatch: the first dimension of every activation passed between stages.
    int64_t rows() const { return options.micro_batch_size * options.seq_length; }
};

// The setup of a run its plan has validated (src/plan/run_plan.h): the plan's schedule, cut and options, each
// stage's parameter layout (its actions are made as the run asks for them: stage_actions).
// `first_iteration` > 0 resumes: each stage runs the actions of iterations >= it, which compute exactly what they
// would have in the whole run (the versions they name come from the checkpoint; work in flight is redone).
PipelineSetup make_pipeline_setup(const RunPlan& plan, int64_t first_iteration = 0);

// Under mpirun each rank is one stage of one replica: UsageError unless the ranks are --stages x
// --data-parallel-size (D > 1 needs mpirun), and for the
// test-only --stall-at-step without mpirun (one stalled stage would stall every stage of the process forever).
void check_stages_match_ranks(const TrainOptions& options, int world_size);

// `train` runs the pipeline executor for more than one stage, an asynchronous schedule, under mpirun, with
// --trace, or with the test-only fault injection; a synchronous schedule on one stage in one process stays the
// plain loop of src/run/trainer.cpp (the executor on one stage ends with the same bits).
bool needs_pipeline(const RunPlan& plan, int world_size);

}  // namespace nb

// Driving StageRunners (pipeline/stage/stage_runner.h) to the end of a training run, and `nobubble train`'s entry
// into the pipeline.
//
//   in one process   P runners, one InProcessTransport network, one thread: each runner in turn advances until
//                    it blocks; a whole round in which no runner and not the collector moved is a deadlock
//                    (std::logic_error naming what every stage waits for). An error of a stage is rethrown with
//                    "stage S: " in front, as the same kind of error.
//   under MPI        one runner per rank (stage = rank): advance, and when blocked wait on the transport. Any
//                    error ends the whole job with one line `nobubble: error: rank R (stage S): ...` and exit
//                    code 1 on every rank (src/core/job_failure.h: the failing rank tells the others, which end
//                    at their next wait), so that no rank hangs waiting for a failed one; a rank that made no
//                    progress for --watchdog-s seconds (a dead or wedged peer) ends the job the same way with
//                    `nobubble: error: watchdog: ...` naming what it waits for (src/run/watchdog.h). The CPU ops
//                    use one thread per rank (the ranks are the parallelism) unless OPENBLAS_NUM_THREADS says
//                    otherwise. With
//                    --device cuda every rank starts its GPU first and the ranks agree on that before NCCL is
//                    set up; then NCCL moves activations and gradients between neighbours
//                    (pipeline/transport/nccl_transport.h).
// Stage 0 (rank 0) prints: the header, a progress line per iteration, the versions line; the caller prints the
// final lines from the summary. Every runner's clock starts at one origin just before the run (what a trace
// across stages needs): in one process the same instant; under MPI rank 0's wall-clock instant, broadcast, which
// ranks on one node share to within a microsecond or so and ranks on several nodes to within their clock
// synchronisation (mpi_driver.cpp, common_origin).
#pragma once

#include <cstdio>
#include <optional>
#include <vector>

#include "pipeline/schedule/pipeline_setup.h"
#include "pipeline/stage/stage_runner.h"
#include "src/run/checkpoint.h"
#include "src/run/progress_collector.h"
#include "src/run/run_log.h"
#include "src/run/trainer.h"

namespace nb {

struct PipelineSummary {
    TrainSummary run;
    std::vector<int64_t> peak_versions;  // per stage: the most weight versions it held at once
    std::string optimizer_sha256;        // `final optimizer state sha256` (pipeline/stage/state_hash.h)
    std::vector<StageFinal> finals;      // per stage: its whole run's busy and wall time, peak activation bytes
    std::vector<IterationTiming> iterations;  // per iteration: rank 0's wall time, each stage's measures
    std::vector<int64_t> planned_act_bytes;   // per stage (part): the activations the memory check planned
    std::vector<int64_t> planned_bytes;       // ... and its whole figure (weights, versions, gradients, state)
};
// What stage 0's collector knows once it is done, and the plan of `setup` on a backend computing in
// `activation_dtype`.
PipelineSummary pipeline_summary(const ProgressCollector& collector, const PipelineSetup& setup, DType activation_dtype);

// Per stage (part), the activation stashes' measured peak over the run beside the plan: train's final line.
ActivationPeaks activation_peaks(const PipelineSummary& summary);

// `resume`: the checkpoint to start from (setup.first_iteration is its step), or null.
PipelineSummary run_in_process(const PipelineSetup& setup, const ResumePoint* resume, std::FILE* log);

#ifdef NOBUBBLE_HAVE_MPI
// This rank's stage of the run; the summary on rank 0, nullopt on the others. Errors do not return: they abort.
std::optional<PipelineSummary> run_over_mpi(const PipelineSetup& setup, const ResumePoint* resume, std::FILE* log);
#endif

// Before the run: `runner`'s stage restored from `resume`'s files (those of the saved stages that held its
// parameters), when there is one; the stop signals' handlers installed when the run saves.
void prepare_runner(StageRunner& runner, const PipelineSetup& setup, const ResumePoint* resume);

// `train` with the pipeline (pipeline_setup.h's needs_pipeline): checks that the ranks are the plan's stages
// (UsageError on every rank alike), then runs over MPI when there are several ranks, else in this process. The
// summary where this process is stage 0, nullopt on the other ranks.
std::optional<PipelineSummary> run_pipeline_training(const RunPlan& plan, std::FILE* log);

}  // namespace nb

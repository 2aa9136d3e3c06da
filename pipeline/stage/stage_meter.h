// StageMeter: what one stage measures about itself while its runner (pipeline/stage/stage_runner.h) runs. The runner
// runs the tasks and tells the meter what happened, at a few points; the meter turns that into numbers:
//   task_started, task_ran   a task ran from the one to the other: its timed record (pipeline/stage/stage_clock.h),
//                            named from the task (F12, recv grad 4, step 2, eval 5, ...)
//   task_started, blocked    the task could not run: the stage is blocked from now until the try that runs it,
//                            then recorded as a wait attributed to what the task waited for (its input
//                            activation or gradient, an evaluation's input, the global clip's all-gather)
//   stash_added, _released   activation stashes of a microbatch in flight: live bytes, their peak since the
//                            last report and over the run; stash_held_briefly, what a backward's rerun of a
//                            recomputed group adds for its length (model/model_step.h peak_bytes)
//   span_ran                 with --trace, a span inside the task now running (an MoE block's dispatch,
//                            pipeline/stage/stage_moe_observer.h), kept for the trace only
//   take_report, finish      the measured fields of a StageReport (busy, wall, peak stash bytes since the
//                            previous report) and of the StageFinal (over the run), and the encoded records for
//                            --trace
// It reads the clock and never changes what the runner computes; the runner never reads a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "pipeline/stage/stage_clock.h"
#include "pipeline/stage/stage_report.h"
#include "pipeline/stage/stage_tasks.h"

namespace nb {

class StageMeter {
public:
    // Times count from `origin`; with `keep_records` (--trace), every timed record is kept for the trace.
    StageMeter(StageClock::Clock::time_point origin, bool keep_records);
    // Times count from `origin` from now on (the drivers' common origin, set once just before the run).
    void start_clock(StageClock::Clock::time_point origin);

    // A try of the next task begins (before its receives ahead are posted).
    void task_started();
    // The task of the try ran: a wait if the stage was blocked before it, then the task's record.
    void task_ran(const StageTask& task);
    // The task of the try could not run; `began_step` when it did its first part before it blocked (an
    // optimizer step under the global clip: the average and sums of squares, recorded as its norm).
    void blocked(const StageTask& task, bool began_step);
    // Data parallelism: the optimizer step of this try is blocked on the replicas' gradient sum; ... the sum of
    // the step has come (in the try now running). The time between counts as the report's replica_wait_s.
    void blocked_on_replicas();
    void replicas_arrived();

    void stash_added(size_t bytes);
    void stash_released(size_t bytes);
    // `bytes` more were live for a moment (a backward's recomputed group) on top of the stashes counted now.
    void stash_held_briefly(size_t bytes);

    bool keeps_records() const { return keep_records_; }
    int64_t now_ns() const { return clock_.now_ns(); }
    // `span` ran from span.start_ns (a now_ns()) until now, inside the running task, whose time it already is.
    void span_ran(TimedTask span);

    // Fills busy_s, wall_s and act_peak_bytes of `r`, since the previous report (the first: since the origin).
    void take_report(StageReport& r);
    // Fills busy_s, wall_s, act_peak_bytes and trace_values of `f`, over the run; returns the encoded records
    // (encode_timed_tasks) when they are kept for the trace.
    std::optional<std::vector<double>> finish(StageFinal& f);

    const StageClock& clock() const { return clock_; }
    size_t live_stash_bytes() const { return live_stash_bytes_; }

private:
    StageClock clock_;
    bool keep_records_;
    int64_t task_start_ns_ = 0;                // of the current try
    std::optional<int64_t> blocked_since_ns_;  // the next task has been blocked since then
    std::optional<int64_t> replicas_since_ns_;  // ... on the replicas' gradient sum since then
    int64_t replica_wait_ns_ = 0;                // such waits since the last report
    size_t live_stash_bytes_ = 0;              // activation stashes of the microbatches in flight
    size_t peak_stash_bytes_report_ = 0;       // ... the most since the last report
    size_t peak_stash_bytes_run_ = 0;          // ... the most over the run
};

}  // namespace nb

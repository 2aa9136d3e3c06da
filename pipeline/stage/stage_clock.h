// StageClock: the records of one stage's time (docs/DESIGN.md section 5, "Outputs": the progress line's busy and bubble
// figures, and `--trace FILE.json`), and the clock they are taken on.
//
// The stage's meter (pipeline/stage/stage_meter.h) times every task its runner runs (pipeline/stage/stage_runner.h) and the
// time it spent blocked in between, as TimedTask records on a clock shared by all stages (microseconds since a
// common origin, kept at nanosecond resolution so that the events of one stage, which follow one another, never
// overlap in the trace):
//   forward, backward, optimizer   the compute of the schedule's actions (optimizer: the optimizer's step; norm: the
//   norm, eval                     averaging and sums of squares that begin it, recorded on their own when the
//                                  step then waits for the global clip's all-gather); evaluation forwards
//   send_*, recv_*                 a send being handed to the transport; a receive being taken from it, at the
//                                  time it completed for the runner
//   wait                           from the moment the runner found its next task blocked until it could run it,
//                                  attributed to this stage (the task it waited for is named)
//   moe_forward, moe_backward      inside a forward or backward: one MoE block's dispatch (route, permute, grouped
//                                  GEMMs, combine), with the block and the microbatch's expert load
//                                  (pipeline/stage/stage_moe_observer.h); their time is already the enclosing task's
// Compute (busy) time is forward + backward + optimizer + norm + eval. Records are kept (for the trace) only when
// asked; the busy total is always kept, and split into intervals for the stage's reports to stage 0.
//
// Records travel to stage 0 as host doubles (Transport::send_values), nine per record, and are named only there
// (to_trace_event), so that recording costs two clock reads per task and no formatting.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "pipeline/stage/trace.h"

namespace nb {

enum class TaskKind : uint8_t {
    forward,
    backward,
    send_activation,
    send_gradient,
    recv_activation,
    recv_gradient,
    norm,
    optimizer,
    eval,
    wait,
    moe_forward,
    moe_backward,
    backward_weight,  // W of a split backward (backward: a fused backward or B)
};
constexpr int kNumTaskKinds = 13;
bool is_compute(TaskKind kind);

struct TimedTask {
    TaskKind kind = TaskKind::forward;
    int64_t index = -1;    // the microbatch (forward ... recv), the optimizer step (norm, optimizer), the evaluation
    int64_t version = -1;  // forward, backward: the weight version used; optimizer: the version it makes
    int64_t start_ns = 0;  // since the common origin
    int64_t duration_ns = 0;
    TaskKind waited_for = TaskKind::wait;  // wait: the kind of the task it waited for (index names it)
    // moe_forward, moe_backward: the block, and its load on the microbatch (model/moe_load.h's LoadFigures).
    int64_t block = -1;
    double load_max_over_mean = 0, idle_fraction = 0;
};

// The trace event of one record of stage `stage`: "F12" forward, "B3" backward (or B), "W3" weight (W of a split
// backward), "send act 4", "recv grad 4",
// "norm 2" and "step 2" optimizer, "eval 5", "wait recv grad 4", "moe L3 F12" and "moe L3 B12" (category moe,
// args layer, load_max_over_mean, idle_fraction).
TraceEvent to_trace_event(const TimedTask& task, int stage);

std::vector<double> encode_timed_tasks(const std::vector<TimedTask>& tasks);
// std::logic_error when `values` is not what encode_timed_tasks makes.
std::vector<TimedTask> decode_timed_tasks(const std::vector<double>& values);
constexpr size_t kValuesPerTimedTask = 9;

class StageClock {
public:
    using Clock = std::chrono::steady_clock;

    // Times count from `origin`; with `keep_records`, every record is kept for the trace.
    explicit StageClock(Clock::time_point origin = Clock::now(), bool keep_records = false);

    int64_t now_ns() const;
    void record(const TimedTask& task);

    double busy_seconds() const { return static_cast<double>(busy_ns_) * 1e-9; }
    const std::vector<TimedTask>& records() const { return records_; }

    // Busy and wall time since the previous call (the first: since the origin), ending now.
    struct Interval {
        double busy_s = 0, wall_s = 0;
    };
    Interval take_interval();

private:
    Clock::time_point origin_;
    bool keep_records_;
    int64_t busy_ns_ = 0;
    int64_t interval_start_ns_ = 0, interval_busy_start_ns_ = 0;
    std::vector<TimedTask> records_;
};

}  // namespace nb

#include "pipeline/stage/stage_meter.h"

#include <algorithm>

namespace nb {

namespace {

// The record of a task that ran from start_ns to end_ns; none for reports and the finish (not timed tasks).
std::optional<TimedTask> task_record(const StageTask& task, int64_t start_ns, int64_t end_ns) {
    if (task.kind == StageTask::Kind::evaluate)
        return TimedTask{TaskKind::eval, task.eval_index, -1, start_ns, end_ns - start_ns};
    if (task.kind != StageTask::Kind::action) return std::nullopt;
    const Action& a = task.action;
    TimedTask t{TaskKind::forward, a.microbatch, -1, start_ns, end_ns - start_ns};
    switch (a.type) {
        case ActionType::forward: t.kind = TaskKind::forward, t.version = a.version; break;
        case ActionType::backward:
        case ActionType::backward_input: t.kind = TaskKind::backward, t.version = a.version; break;
        case ActionType::backward_weight: t.kind = TaskKind::backward_weight, t.version = a.version; break;
        case ActionType::send_activation: t.kind = TaskKind::send_activation; break;
        case ActionType::send_gradient: t.kind = TaskKind::send_gradient; break;
        case ActionType::recv_activation: t.kind = TaskKind::recv_activation; break;
        case ActionType::recv_gradient: t.kind = TaskKind::recv_gradient; break;
        case ActionType::optimizer_step: t.kind = TaskKind::optimizer, t.index = a.step, t.version = a.version; break;
    }
    return t;
}

// A wait from start_ns to end_ns before `task` could run, naming what it waited for.
TimedTask wait_record(const StageTask& task, int64_t start_ns, int64_t end_ns) {
    TimedTask wait{TaskKind::wait, -1, -1, start_ns, end_ns - start_ns};
    if (task.kind == StageTask::Kind::evaluate) {  // its input activation
        wait.waited_for = TaskKind::eval, wait.index = task.eval_index;
    } else if (task.kind == StageTask::Kind::action) {
        const Action& a = task.action;
        wait.waited_for = a.type == ActionType::recv_activation ? TaskKind::recv_activation
                          : a.type == ActionType::recv_gradient ? TaskKind::recv_gradient
                                                                : TaskKind::norm;  // the clip's all-gather
        wait.index = a.type == ActionType::optimizer_step ? a.step : a.microbatch;
    }
    return wait;
}

}  // namespace

StageMeter::StageMeter(StageClock::Clock::time_point origin, bool keep_records)
    : clock_(origin, keep_records), keep_records_(keep_records) {}

void StageMeter::start_clock(StageClock::Clock::time_point origin) { clock_ = StageClock(origin, keep_records_); }

void StageMeter::task_started() { task_start_ns_ = clock_.now_ns(); }

void StageMeter::task_ran(const StageTask& task) {
    const int64_t end = clock_.now_ns();
    if (blocked_since_ns_) {
        // Blocked from the end of the first try that could not run it until this try began.
        clock_.record(wait_record(task, *blocked_since_ns_, task_start_ns_));
        blocked_since_ns_.reset();
    }
    if (const std::optional<TimedTask> t = task_record(task, task_start_ns_, end)) clock_.record(*t);
}

void StageMeter::blocked(const StageTask& task, bool began_step) {
    const int64_t end = clock_.now_ns();
    if (began_step) clock_.record({TaskKind::norm, task.action.step, -1, task_start_ns_, end - task_start_ns_});
    if (!blocked_since_ns_) blocked_since_ns_ = end;
}

void StageMeter::blocked_on_replicas() {
    if (!replicas_since_ns_) replicas_since_ns_ = clock_.now_ns();
}

void StageMeter::replicas_arrived() {
    if (!replicas_since_ns_) return;
    replica_wait_ns_ += task_start_ns_ - *replicas_since_ns_;
    replicas_since_ns_.reset();
}

void StageMeter::stash_added(size_t bytes) {
    live_stash_bytes_ += bytes;
    peak_stash_bytes_report_ = std::max(peak_stash_bytes_report_, live_stash_bytes_);
    peak_stash_bytes_run_ = std::max(peak_stash_bytes_run_, live_stash_bytes_);
}

void StageMeter::stash_released(size_t bytes) { live_stash_bytes_ -= bytes; }

void StageMeter::stash_held_briefly(size_t bytes) {
    stash_added(bytes);
    stash_released(bytes);
}

void StageMeter::span_ran(TimedTask span) {
    span.duration_ns = clock_.now_ns() - span.start_ns;
    clock_.record(span);  // not a compute kind: the busy time stays the enclosing task's
}

void StageMeter::take_report(StageReport& r) {
    const StageClock::Interval interval = clock_.take_interval();
    r.busy_s = interval.busy_s;
    r.wall_s = interval.wall_s;
    r.act_peak_bytes = static_cast<double>(peak_stash_bytes_report_);
    r.replica_wait_s = static_cast<double>(replica_wait_ns_) * 1e-9;
    replica_wait_ns_ = 0;
    peak_stash_bytes_report_ = live_stash_bytes_;
}

std::optional<std::vector<double>> StageMeter::finish(StageFinal& f) {
    f.busy_s = clock_.busy_seconds();
    f.wall_s = static_cast<double>(clock_.now_ns()) * 1e-9;
    f.act_peak_bytes = static_cast<double>(peak_stash_bytes_run_);
    std::vector<double> trace = encode_timed_tasks(clock_.records());
    f.trace_values = static_cast<int64_t>(trace.size());
    if (!keep_records_) return std::nullopt;
    return trace;
}

}  // namespace nb

#include "pipeline/stage/stage_clock.h"

#include <stdexcept>

#include <fmt/format.h>

namespace nb {

bool is_compute(TaskKind kind) {
    switch (kind) {
        case TaskKind::forward:
        case TaskKind::backward:
        case TaskKind::backward_weight:
        case TaskKind::norm:
        case TaskKind::optimizer:
        case TaskKind::eval: return true;
        default: return false;
    }
}

namespace {

const char* category(TaskKind kind) {
    switch (kind) {
        case TaskKind::forward: return "forward";
        case TaskKind::backward: return "backward";
        case TaskKind::backward_weight: return "weight";
        case TaskKind::send_activation:
        case TaskKind::send_gradient: return "send";
        case TaskKind::recv_activation:
        case TaskKind::recv_gradient: return "recv";
        case TaskKind::norm:
        case TaskKind::optimizer: return "optimizer";
        case TaskKind::eval: return "eval";
        case TaskKind::wait: return "wait";
        case TaskKind::moe_forward:
        case TaskKind::moe_backward: return "moe";
    }
    return "?";
}

std::string task_name(TaskKind kind, int64_t index, int64_t block) {
    switch (kind) {
        case TaskKind::forward: return fmt::format("F{}", index);
        case TaskKind::backward: return fmt::format("B{}", index);
        case TaskKind::backward_weight: return fmt::format("W{}", index);
        case TaskKind::send_activation: return fmt::format("send act {}", index);
        case TaskKind::send_gradient: return fmt::format("send grad {}", index);
        case TaskKind::recv_activation: return fmt::format("recv act {}", index);
        case TaskKind::recv_gradient: return fmt::format("recv grad {}", index);
        case TaskKind::norm: return fmt::format("norm {}", index);
        case TaskKind::optimizer: return fmt::format("step {}", index);
        case TaskKind::eval: return fmt::format("eval {}", index);
        case TaskKind::wait: return "wait";
        case TaskKind::moe_forward: return fmt::format("moe L{} F{}", block, index);
        case TaskKind::moe_backward: return fmt::format("moe L{} B{}", block, index);
    }
    return "?";
}

bool is_microbatch_task(TaskKind kind) {
    return kind != TaskKind::norm && kind != TaskKind::optimizer && kind != TaskKind::eval && kind != TaskKind::wait;
}

}  // namespace

TraceEvent to_trace_event(const TimedTask& t, int stage) {
    TraceEvent e;
    e.name = t.kind == TaskKind::wait ? "wait " + task_name(t.waited_for, t.index, t.block)
                                      : task_name(t.kind, t.index, t.block);
    e.category = category(t.kind);
    e.stage = stage;
    e.start_us = static_cast<double>(t.start_ns) * 1e-3;
    e.duration_us = static_cast<double>(t.duration_ns) * 1e-3;
    const TaskKind about = t.kind == TaskKind::wait ? t.waited_for : t.kind;
    if (is_microbatch_task(about)) e.microbatch = t.index;
    e.version = t.version;
    if (t.kind == TaskKind::moe_forward || t.kind == TaskKind::moe_backward)
        e.numbers = {{"layer", static_cast<double>(t.block)},
                     {"load_max_over_mean", t.load_max_over_mean},
                     {"idle_fraction", t.idle_fraction}};
    return e;
}

// Per record: kind, index, version, start_ns, duration_ns, waited_for, block, load_max_over_mean, idle_fraction
// (doubles hold these integers exactly below 2^53 ns, 104 days).
std::vector<double> encode_timed_tasks(const std::vector<TimedTask>& tasks) {
    std::vector<double> v;
    v.reserve(tasks.size() * kValuesPerTimedTask);
    for (const TimedTask& t : tasks) {
        v.push_back(static_cast<double>(t.kind));
        v.push_back(static_cast<double>(t.index));
        v.push_back(static_cast<double>(t.version));
        v.push_back(static_cast<double>(t.start_ns));
        v.push_back(static_cast<double>(t.duration_ns));
        v.push_back(static_cast<double>(t.waited_for));
        v.push_back(static_cast<double>(t.block));
        v.push_back(t.load_max_over_mean);
        v.push_back(t.idle_fraction);
    }
    return v;
}

std::vector<TimedTask> decode_timed_tasks(const std::vector<double>& v) {
    if (v.size() % kValuesPerTimedTask != 0)
        throw std::logic_error(fmt::format("timed tasks: {} values are not records of {}", v.size(), kValuesPerTimedTask));
    const auto kind_of = [](double d) {
        if (!(d >= 0 && d < kNumTaskKinds)) throw std::logic_error(fmt::format("timed tasks: no task kind {}", d));
        return static_cast<TaskKind>(static_cast<int>(d));
    };
    std::vector<TimedTask> tasks;
    tasks.reserve(v.size() / kValuesPerTimedTask);
    for (size_t i = 0; i < v.size(); i += kValuesPerTimedTask)
        tasks.push_back({kind_of(v[i]), static_cast<int64_t>(v[i + 1]), static_cast<int64_t>(v[i + 2]),
                         static_cast<int64_t>(v[i + 3]), static_cast<int64_t>(v[i + 4]), kind_of(v[i + 5]),
                         static_cast<int64_t>(v[i + 6]), v[i + 7], v[i + 8]});
    return tasks;
}

StageClock::StageClock(Clock::time_point origin, bool keep_records) : origin_(origin), keep_records_(keep_records) {}

int64_t StageClock::now_ns() const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - origin_).count();
}

void StageClock::record(const TimedTask& task) {
    if (is_compute(task.kind)) busy_ns_ += task.duration_ns;
    if (keep_records_) records_.push_back(task);
}

StageClock::Interval StageClock::take_interval() {
    const int64_t now = now_ns();
    Interval i{static_cast<double>(busy_ns_ - interval_busy_start_ns_) * 1e-9,
               static_cast<double>(now - interval_start_ns_) * 1e-9};
    interval_start_ns_ = now;
    interval_busy_start_ns_ = busy_ns_;
    return i;
}

}  // namespace nb

// StageMeter (pipeline/stage/stage_meter.h): what a stage's runner tells it becomes the measured fields of the stage's
// reports and final values and its timed records: stash bytes peak per report and over the run, a blocked
// stretch is one wait attributed to what the task waited for, and only compute counts as busy.
#include <doctest/doctest.h>

#include <chrono>
#include <optional>
#include <thread>
#include <vector>

#include "pipeline/stage/stage_meter.h"

using nb::ActionType;
using nb::StageMeter;
using nb::StageTask;
using nb::TaskKind;
using nb::TimedTask;

namespace {

StageTask action_task(ActionType type, int64_t microbatch, int64_t step, int64_t version, int peer) {
    StageTask t;
    t.kind = StageTask::Kind::action;
    t.action = {type, microbatch, step, version, peer};
    return t;
}

StageTask eval_task(int64_t eval_index) {
    StageTask t;
    t.kind = StageTask::Kind::evaluate;
    t.iteration = 0;
    t.eval_index = eval_index;
    t.eval_position = 0;
    return t;
}

// `tries` tries of `task` that find it blocked, a pause after each, then the try that runs it.
void blocked_then_ran(StageMeter& meter, const StageTask& task, int tries, bool began_step = false) {
    for (int i = 0; i < tries; ++i) {
        meter.task_started();
        meter.blocked(task, began_step && i == 0);
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    meter.task_started();
    meter.task_ran(task);
}

}  // namespace

TEST_CASE("stage meter: stash bytes peak per report (from what is live at the report) and over the run") {
    StageMeter meter(nb::StageClock::Clock::now(), false);
    meter.stash_added(100);
    meter.stash_added(50);
    meter.stash_released(100);
    CHECK(meter.live_stash_bytes() == 50);
    nb::StageReport r;
    meter.take_report(r);
    CHECK(r.act_peak_bytes == 150);
    meter.stash_added(20);
    meter.take_report(r);
    CHECK(r.act_peak_bytes == 70);  // 50 still live at the previous report, then 20 more
    meter.stash_released(50);
    meter.stash_released(20);
    meter.take_report(r);
    CHECK(r.act_peak_bytes == 70);  // held at the previous report, released after it
    meter.take_report(r);
    CHECK(r.act_peak_bytes == 0);
    nb::StageFinal f;
    CHECK_FALSE(meter.finish(f).has_value());  // no records kept without --trace
    CHECK(f.act_peak_bytes == 150);
    CHECK(f.trace_values == 0);
}

TEST_CASE("stage meter: a blocked stretch is one wait, named after what the task waited for, and not busy") {
    StageMeter meter(nb::StageClock::Clock::now(), true);
    const StageTask recv = action_task(ActionType::recv_gradient, 4, 1, 1, 2);
    const StageTask forward = action_task(ActionType::forward, 5, 1, 1, -1);
    const StageTask step = action_task(ActionType::optimizer_step, -1, 2, 3, -1);
    const StageTask eval = eval_task(5);
    StageTask report;
    report.kind = StageTask::Kind::report;
    report.iteration = 0;

    blocked_then_ran(meter, recv, 2);
    blocked_then_ran(meter, forward, 0);
    blocked_then_ran(meter, step, 2, true);  // the global clip: its norm, then the all-gather's wait
    blocked_then_ran(meter, eval, 1);
    blocked_then_ran(meter, report, 0);  // not a timed task

    const std::vector<TimedTask>& got = meter.clock().records();
    REQUIRE(got.size() == 8);
    const TaskKind kinds[] = {TaskKind::wait, TaskKind::recv_gradient, TaskKind::forward, TaskKind::norm,
                              TaskKind::wait, TaskKind::optimizer,     TaskKind::wait,    TaskKind::eval};
    for (size_t i = 0; i < got.size(); ++i) {
        CAPTURE(i);
        CHECK(got[i].kind == kinds[i]);
        CHECK(got[i].duration_ns >= 0);
        if (i > 0) CHECK(got[i].start_ns >= got[i - 1].start_ns + got[i - 1].duration_ns);  // never overlap
    }
    // The wait runs from the end of the first blocked try to the start of the try that ran the task: it spans
    // both pauses, and its task follows it at once.
    CHECK(got[0].waited_for == TaskKind::recv_gradient);
    CHECK(got[0].index == 4);
    CHECK(got[0].duration_ns >= 2'000'000);
    CHECK(got[0].start_ns + got[0].duration_ns == got[1].start_ns);
    CHECK(got[1].index == 4);
    CHECK(got[2].index == 5);
    CHECK(got[2].version == 1);
    CHECK(got[3].index == 2);  // the norm is the optimizer step's
    CHECK(got[4].start_ns == got[3].start_ns + got[3].duration_ns);
    CHECK(to_trace_event(got[4], 0).name == "wait norm 2");
    CHECK(got[5].index == 2);
    CHECK(got[5].version == 3);
    CHECK(to_trace_event(got[6], 0).name == "wait eval 5");
    CHECK(got[7].index == 5);

    int64_t compute_ns = 0;
    for (const TimedTask& t : got)
        if (nb::is_compute(t.kind)) compute_ns += t.duration_ns;
    nb::StageReport r;
    meter.take_report(r);
    CHECK(r.busy_s == static_cast<double>(compute_ns) * 1e-9);
    CHECK(r.wall_s >= static_cast<double>(got[0].duration_ns + got[4].duration_ns) * 1e-9);

    nb::StageFinal f;
    const std::optional<std::vector<double>> trace = meter.finish(f);
    REQUIRE(trace.has_value());
    CHECK(f.trace_values == static_cast<int64_t>(got.size() * nb::kValuesPerTimedTask));
    CHECK(nb::decode_timed_tasks(*trace).size() == got.size());
    CHECK(f.busy_s == r.busy_s);
    CHECK(f.wall_s >= r.wall_s);
}

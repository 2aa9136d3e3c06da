// The watchdog's clock (src/run/watchdog.h): it fires after the limit of waiting without progress, never when
// off, and not for time its process was stopped; the waits it allows end when it would fire; its line; and what
// a blocked stage says it waits for where the task's own description does not (the all-gather of a global
// clip). tests/cli/test_watchdog.sh runs it under mpirun against a stalled and a stopped rank.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>

#include "pipeline/schedule/pipeline_setup.h"
#include "src/run/pipeline_driver.h"
#include "src/plan/rank_layout.h"
#include "src/run/watchdog.h"
#include "tests/unit/pipeline_test_util.h"

using namespace std::chrono_literals;
using nb::Watchdog;

// Looks every `step` from `from` to `to` (exclusive) without progress; true if the watchdog fired on one.
bool idle_from(Watchdog& w, Watchdog::Clock::time_point from, Watchdog::Clock::time_point to,
               Watchdog::Clock::duration step) {
    bool fired = false;
    for (auto t = from; t < to; t += step) fired |= w.idle(t);
    return fired;
}

TEST_CASE("watchdog: fires after the limit of waiting, progress restarts it, 0 never fires") {
    const Watchdog::Clock::time_point t0{};
    Watchdog w(3, t0);
    CHECK_FALSE(idle_from(w, t0 + 100ms, t0 + 3s, 100ms));
    CHECK(w.idle(t0 + 3s));
    w.progressed(t0 + 4s);
    CHECK_FALSE(idle_from(w, t0 + 4100ms, t0 + 7s, 100ms));
    CHECK(w.idle(t0 + 7s));

    Watchdog off(0, t0);
    CHECK_FALSE(idle_from(off, t0 + 1s, t0 + 100s, 1s));
    CHECK(off.wait_limit() == Watchdog::kLongestWait);
}

TEST_CASE("watchdog: time the process was stopped (a gap between looks beyond kLongestGap) is not waiting") {
    const Watchdog::Clock::time_point t0{};
    Watchdog w(3, t0);
    CHECK_FALSE(w.idle(t0 + 1s));
    CHECK_FALSE(w.idle(t0 + 1h));  // stopped for an hour, then continued: 1 s waited so far
    CHECK_FALSE(idle_from(w, t0 + 1h + 500ms, t0 + 1h + 2s, 500ms));
    CHECK(w.idle(t0 + 1h + 2s));  // 1 s + 2 s
    Watchdog edge(3, t0);
    CHECK_FALSE(edge.idle(t0 + Watchdog::kLongestGap));  // a gap of exactly kLongestGap counts
    CHECK(edge.idle(t0 + Watchdog::kLongestGap + 1s));
}

TEST_CASE("watchdog: a wait ends when the watchdog would fire, and never lasts longer than kLongestWait") {
    const Watchdog::Clock::time_point t0{};
    Watchdog w(2.5, t0);
    CHECK(w.wait_limit() == Watchdog::kLongestWait);
    w.idle(t0 + 2s);
    CHECK(w.wait_limit() == 500ms);
    w.idle(t0 + 2499500us);
    CHECK(w.wait_limit() == 1ms);  // rounded up: the wait ends at or after the moment it fires
    w.idle(t0 + 3s);
    CHECK(w.wait_limit() == 0ms);
    Watchdog huge(1e300, t0);  // a huge limit is held in double seconds: no overflow
    CHECK_FALSE(idle_from(huge, t0 + 1s, t0 + 10s, 1s));
    CHECK(huge.wait_limit() == Watchdog::kLongestWait);
}

TEST_CASE("watchdog: its line names the rank, the stage (and replica), the limit and what the rank waits for") {
    CHECK(nb::watchdog_message(nb::RankLayout{3, 1}.describe(2), 3, "recv_activation mb 6 from stage 1") ==
          "watchdog: rank 2 (stage 2) made no progress for 3 s; it waits for recv_activation mb 6 from stage 1");
    CHECK(nb::watchdog_message(nb::RankLayout{2, 2}.describe(3), 0.5, "x") ==
          "watchdog: rank 3 (stage 1 of replica 1) made no progress for 0.5 s; it waits for x");
}

TEST_CASE("watchdog: a stage blocked in its optimizer step under a global clip says it waits for the all-gather") {
    nb::test::TempDir dir;
    nb::TrainOptions o = nb::test::pipeline_run(nb::test::write_corpus(dir), "gpipe", 2, 2, 2, {3, 32, 48, 16});
    nb::PipelineSetup setup = nb::make_pipeline_setup(nb::make_run_plan(o));
    // Stage 1 ends before its first optimizer step, so stage 0's waits for stage 1's clip sums forever.
    nb::StagePlan& last = setup.fixed_plans[1] = setup.stage_plan(1);
    last.erase(std::find_if(last.begin(), last.end(),
                            [](const nb::Action& a) { return a.type == nb::ActionType::optimizer_step; }),
               last.end());
    nb::test::NullLog log;
    CHECK_THROWS_WITH_AS(nb::run_in_process(setup, nullptr, log.f),
                         doctest::Contains("stage 0 waits at optimizer_step 0 -> W1: the all-gather of every "
                                           "stage's clip sums (--clip-scope global);"),
                         std::logic_error);
}

namespace {

// A run of `schedule` on 2 stages with --save in which stage 1 never votes on iteration `missing` (its optimizer
// step that ends it is cut from its plan) and ends after its last send of iteration `missing + 1`: stage 0 gets
// through iteration `missing + 1` and then waits at the gate of its next task, for the vote of `missing`, forever.
// Each stage clips on its own (so that stage 0's steps need nothing of stage 1's; a test-only setting for 1f1b).
// The message of the deadlock the in-process driver reports (what each stage waits for, as the watchdog names it).
std::string deadlock_with_missing_vote(const char* schedule, int64_t missing, int64_t save_interval) {
    nb::test::TempDir dir;
    nb::TrainOptions o = nb::test::pipeline_run(nb::test::write_corpus(dir), schedule, 2, 2, 6, {3, 32, 48, 16});
    o.save_dir = dir.file("ckpt");
    o.save_interval = save_interval;
    nb::PipelineSetup setup = nb::make_pipeline_setup(nb::make_run_plan(o));
    setup.options.clip_scope = nb::ClipScope::stage;
    nb::StagePlan& last = setup.fixed_plans[1] = setup.stage_plan(1);
    auto it_of = [&](const nb::Action& a) { return setup.iteration_of_step(a.step); };
    std::erase_if(last, [&](const nb::Action& a) {
        return it_of(a) > missing + 1 || (it_of(a) == missing && a.type == nb::ActionType::optimizer_step);
    });
    while (last.back().type != nb::ActionType::send_gradient) last.pop_back();
    for (nb::Action& a : last)  // iteration missing + 1 runs on the weights the cut step would have replaced
        if (it_of(a) == missing + 1 && a.type != nb::ActionType::optimizer_step) --a.version;
    nb::test::NullLog log;
    try {
        nb::run_in_process(setup, nullptr, log.f);
    } catch (const std::logic_error& e) {
        return e.what();
    }
    return "no deadlock";
}

}  // namespace

TEST_CASE("watchdog: a stage held for a stop vote names the vote, and a checkpoint only where one is due") {
    // 1f1b, L = 2: the save after iteration 3 waits for the vote after iteration 2, whether iteration 4 runs. No
    // checkpoint is due there: the save task only asks whether the run stops.
    const std::string not_due = deadlock_with_missing_vote("1f1b", 2, 100);
    CAPTURE(not_due);
    CHECK(not_due.find("stage 0 waits at the stop vote after iteration 2 (whether iteration 4 runs): every stage's "
                       "all-gather of it;") != std::string::npos);
    CHECK(not_due.find("checkpoint") == std::string::npos);
    // With --save-interval 2 the checkpoint after iteration 3 (step 4) is due: it is named, with the vote.
    const std::string due = deadlock_with_missing_vote("1f1b", 2, 2);
    CAPTURE(due);
    CHECK(due.find("stage 0 waits at checkpoint after iteration 3: the stop vote after iteration 2") !=
          std::string::npos);
    // 2bw: stage 0 forwards iteration 4 before iteration 3 ends; its forward is held for the same vote.
    const std::string forward = deadlock_with_missing_vote("2bw", 2, 100);
    CAPTURE(forward);
    CHECK(forward.find("stage 0 waits at F8 (step 4, W3): the stop vote after iteration 2 (whether iteration 4 "
                       "runs)") != std::string::npos);
}

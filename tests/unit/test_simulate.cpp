// The schedule simulator and its text timeline: the known bubble formulas, transfer timing, deadlock reports,
// speed at P = 64, m = 512, and the rendering of a small grid and of a large run's summary.
#include <doctest/doctest.h>

#include "tests/unit/test_util.h"

#include <chrono>
#include <tuple>
#include <string>
#include <vector>

#include "src/core/error.h"
#include "pipeline/schedule/schedule.h"
#include "pipeline/schedule/simulate.h"
#include "pipeline/schedule/timeline_text.h"

using namespace nb;
using namespace nb::test;

namespace {

ScheduleSpec make_spec(ScheduleKind kind, int p, int64_t m, int64_t steps) {
    return {.kind = kind, .stages = p, .microbatches = m, .steps = steps};
}

// As `nobubble schedule` simulates: the synchronous schedules' steps wait for every stage's (the global clip).
SimResult simulate_spec(const ScheduleSpec& spec, SimCosts costs = {}) {
    costs.step_barrier = nb::steps_synchronize(spec.kind);
    return nb::simulate(nb::build_schedule(spec), costs, spec.placement());
}

}  // namespace

TEST_CASE("1f1b and gpipe, unit costs with backward = 2 x forward: bubble = (p-1)/(m+p-1)") {
    for (ScheduleKind kind : {ScheduleKind::one_f_one_b, ScheduleKind::gpipe})
        for (int p : {1, 2, 3, 4, 8, 16})
            for (int64_t m : {1, 2, 3, 4, 8, 13, 32})
                for (int64_t steps : {1, 3}) {
                    CAPTURE(p);
                    CAPTURE(m);
                    CAPTURE(steps);
                    const SimResult r = simulate_spec(make_spec(kind, p, m, steps));
                    REQUIRE_FALSE(r.deadlock);
                    const double expected = double(p - 1) / double(m + p - 1);
                    CHECK(std::abs(r.bubble_fraction - expected) < 1e-9);
                    CHECK(r.makespan_ms == doctest::Approx(steps * (m + p - 1) * 3.0).epsilon(1e-12));
                    for (double busy : r.busy_ms) CHECK(busy == doctest::Approx(steps * m * 3.0));
                }
}

// Qi et al. 2024 (ZB-H1): a 1f1b step takes m(F+B+W) + (p-1)(F+B+W), a ZB-H1 step m(F+B+W) + (p-1)(F+B-W) (for
// W <= F, the paper's regime): at F = B = W the idle time is a third of 1f1b's, at the same peak activations.
TEST_CASE("zb-h1: makespan m(F+B+W) + (p-1)(F+B-W) per step, a third of 1f1b's bubble at F = B = W") {
    for (int p : {1, 2, 3, 4, 8})
        for (int64_t m : {int64_t{p}, int64_t{2 * p}, int64_t{32}})
            for (int64_t steps : {1, 2}) {
                CAPTURE(p);
                CAPTURE(m);
                CAPTURE(steps);
                const SimResult zb = simulate_spec(make_spec(ScheduleKind::zb_h1, p, m, steps));
                const SimResult fused = simulate_spec(make_spec(ScheduleKind::one_f_one_b, p, m, steps));
                REQUIRE_FALSE(zb.deadlock);
                CHECK(zb.makespan_ms == doctest::Approx(steps * (3.0 * m + (p - 1))).epsilon(1e-12));
                const double zb_idle = zb.makespan_ms - steps * 3.0 * m, fused_idle = fused.makespan_ms - steps * 3.0 * m;
                CHECK(zb_idle == doctest::Approx(fused_idle / 3).epsilon(1e-12));
                for (double busy : zb.busy_ms) CHECK(busy == doctest::Approx(steps * m * 3.0));
            }
    for (auto [f, b, w] : {std::tuple{1.0, 1.0, 0.5}, std::tuple{2.0, 1.0, 1.0}, std::tuple{1.0, 2.0, 1.0}}) {
        SimCosts costs;
        costs.forward_ms = f;
        costs.backward_input_ms = b;
        costs.backward_weight_ms = w;
        const SimResult r = simulate_spec(make_spec(ScheduleKind::zb_h1, 4, 8, 1), costs);
        CHECK(r.makespan_ms == doctest::Approx(8 * (f + b + w) + 3 * (f + b - w)).epsilon(1e-12));
    }
}

// Narayanan et al. 2021 (interleaved 1F1B): with v chunks per rank, each 1/v of a stage's work, the bubble shrinks
// by v: (p-1)/(v m + p - 1) at backward = 2 x forward.
TEST_CASE("interleaved 1f1b: bubble = (p-1)/(v m + p - 1)") {
    for (int p : {2, 4, 8})
        for (int v : {1, 2, 3, 4})
            for (int64_t m : {int64_t{p}, int64_t{2 * p}, int64_t{4 * p}}) {
                CAPTURE(p);
                CAPTURE(v);
                CAPTURE(m);
                ScheduleSpec spec = make_spec(ScheduleKind::one_f_one_b, p, m, 2);
                spec.virtual_stages = v;
                const SimResult r = simulate_spec(spec);
                REQUIRE_FALSE(r.deadlock);
                CHECK(r.bubble_fraction == doctest::Approx(double(p - 1) / double(v * m + p - 1)).epsilon(1e-9));
                for (double busy : r.busy_ms) CHECK(busy == doctest::Approx(2 * m * 3.0));
            }
}

// ZB-V (Qi et al. 2024) with a flush after every step: the first microbatch needs p-1 chunk forwards (F/2 each)
// before it reaches rank p-1, so no such schedule can idle less than (p-1) F/2 per rank and step. At F = B = W and
// m >= 2p-1 zb-v idles exactly that: half of zb-h1's (p-1) F, a third of interleaved 1F1B's at v = 2. (The paper's
// "zero bubble" also lets the next step's forwards start before this step's optimizer step, which a synchronous
// schedule with a flush does not.)
TEST_CASE("zb-v: idle (p-1) F/2 per step at F = B = W, the least any flushing schedule can have: below zb-h1's") {
    for (int p : {1, 2, 3, 4, 8})
        for (int64_t m : {int64_t{2 * p - 1}, int64_t{2 * p}, int64_t{32}})
            for (int64_t steps : {1, 2}) {
                CAPTURE(p);
                CAPTURE(m);
                CAPTURE(steps);
                const SimResult zbv = simulate_spec(make_spec(ScheduleKind::zb_v, p, m, steps));
                const SimResult zbh1 = simulate_spec(make_spec(ScheduleKind::zb_h1, p, m, steps));
                REQUIRE_FALSE(zbv.deadlock);
                // Every step the least: the global clip's all-gather ends each step on every part at once.
                const double least_step_ms = 3.0 * m + 0.5 * (p - 1);
                CHECK(zbv.makespan_ms == doctest::Approx(steps * least_step_ms).epsilon(1e-12));
                // Without that barrier (a clip per stage) a part may start step 1 while another ends step 0.
                SimCosts free;
                const ScheduleSpec spec = make_spec(ScheduleKind::zb_v, p, m, steps);
                const SimResult unbarred = nb::simulate(nb::build_schedule(spec), free, spec.placement());
                CHECK(unbarred.makespan_ms <= zbv.makespan_ms + 1e-9);
                for (double busy : zbv.busy_ms) CHECK(busy == doctest::Approx(steps * m * 3.0));
                if (p > 1) CHECK(zbv.bubble_fraction < zbh1.bubble_fraction);
            }
    // Fewer microbatches than the V's warm-up needs: no deadlock, and never worse than zb-h1.
    for (int p : {2, 4, 8})
        for (int64_t m = 1; m < 2 * p - 1; ++m) {
            CAPTURE(p);
            CAPTURE(m);
            const SimResult zbv = simulate_spec(make_spec(ScheduleKind::zb_v, p, m, 1));
            REQUIRE_FALSE(zbv.deadlock);
            CHECK(zbv.makespan_ms <= simulate_spec(make_spec(ScheduleKind::zb_h1, p, m, 1)).makespan_ms + 1e-9);
        }
}

TEST_CASE("2bw and pipedream stream steps without flushes: bubble = (p-1)/(T*m+p-1), far below 1f1b's") {
    const int p = 4;
    const int64_t m = 8, steps = 20;
    const double sync_bubble = simulate_spec(make_spec(ScheduleKind::one_f_one_b, p, m, steps)).bubble_fraction;
    for (ScheduleKind kind : {ScheduleKind::two_bw, ScheduleKind::pipedream}) {
        const SimResult r = simulate_spec(make_spec(kind, p, m, steps));
        REQUIRE_FALSE(r.deadlock);
        CHECK(std::abs(r.bubble_fraction - double(p - 1) / double(steps * m + p - 1)) < 1e-9);
        CHECK(r.bubble_fraction < sync_bubble / 10);
    }
    CHECK(std::abs(sync_bubble - 3.0 / 11.0) < 1e-9);
}

// An uneven cut: part_scale stretches each part's compute. The slowest part sets the pace of a streaming schedule, and
// the others idle for the difference (the bubble `nobubble info` predicts for a cut).
TEST_CASE("part_scale: a part twice an even one's cost takes twice as long; the slowest sets the pace") {
    SimCosts costs;
    costs.part_scale = {2.0};
    const SimResult one = simulate_spec(make_spec(ScheduleKind::one_f_one_b, 1, 4, 1), costs);
    CHECK(one.makespan_ms == doctest::Approx(2 * 4 * 3.0));
    costs.part_scale = {2.0, 1.0};
    const SimResult r = simulate_spec(make_spec(ScheduleKind::two_bw, 2, 8, 20), costs);
    REQUIRE_FALSE(r.deadlock);
    CHECK(r.busy_ms[0] == doctest::Approx(2 * r.busy_ms[1]));
    CHECK(r.makespan_ms >= r.busy_ms[0]);
    CHECK(r.bubble_fraction == doctest::Approx(0.25).epsilon(0.02));  // stage 1 idles half the time
    // With chunks, per part (zb-v's rank 0 holds parts 0 and 3).
    costs.part_scale = {1.0, 1.0, 1.0, 3.0};
    const ScheduleSpec zbv = make_spec(ScheduleKind::zb_v, 2, 4, 1);
    const SimResult v = nb::simulate(nb::build_schedule(zbv), costs, zbv.placement());
    CHECK(v.busy_ms[0] == doctest::Approx(4 * 3.0 * (1.0 + 3.0) / 2));
    CHECK(v.busy_ms[1] == doctest::Approx(4 * 3.0 * (1.0 + 1.0) / 2));
    costs.part_scale = {1.0, 1.0, 1.0};
    CHECK_THROWS_AS(nb::simulate(nb::build_schedule(zbv), costs, zbv.placement()), std::invalid_argument);
    costs.part_scale = {1.0, -1.0};
    CHECK_THROWS_AS(costs.validate(), UsageError);
}

TEST_CASE("transfers: a receive completes at max(arrival, reached); sends take no time") {
    // 1f1b, p = 2, m = 1, p2p 0.5: F0 on stage 0 [0,1], arrives 1.5; stage 1 F0 [1.5,2.5], B0 [2.5,4.5];
    // gradient arrives 5.0; stage 0 B0 [5,7].
    SimCosts costs;
    costs.p2p_ms = 0.5;
    const SimResult r = simulate_spec(make_spec(ScheduleKind::one_f_one_b, 2, 1, 1), costs);
    REQUIRE_FALSE(r.deadlock);
    CHECK(r.makespan_ms == doctest::Approx(7.0));
    const auto& s1 = r.timeline[1];
    REQUIRE(s1.size() == 5);  // recv_activation, F, B, send_gradient, optimizer_step
    CHECK(s1[0].action.type == ActionType::recv_activation);
    CHECK(s1[0].start_ms == 0.0);
    CHECK(s1[0].end_ms == doctest::Approx(1.5));
    CHECK(s1[1].start_ms == doctest::Approx(1.5));
    CHECK(s1[3].action.type == ActionType::send_gradient);
    CHECK(s1[3].start_ms == s1[3].end_ms);
    const auto& s0 = r.timeline[0];
    CHECK(s0[2].action.type == ActionType::recv_gradient);
    CHECK(s0[2].end_ms == doctest::Approx(5.0));
    CHECK(s0[3].start_ms == doctest::Approx(5.0));
    CHECK(r.busy_ms[0] == doctest::Approx(3.0));
    CHECK(r.bubble_fraction == doctest::Approx(1.0 - 6.0 / 14.0));
}

TEST_CASE("optimizer steps count as busy time") {
    SimCosts costs;
    costs.optimizer_ms = 1;
    const SimResult r = simulate_spec(make_spec(ScheduleKind::one_f_one_b, 1, 2, 3), costs);
    CHECK(r.makespan_ms == doctest::Approx(3 * (2 * 3.0 + 1)));
    CHECK(r.bubble_fraction == doctest::Approx(0.0));
}

TEST_CASE("deadlock: two stages that each wait for the other first, reported with what each waits for") {
    const std::vector<StagePlan> plans = {
        {{ActionType::recv_gradient, 0, 0, 0, 1}, {ActionType::forward, 0, 0, 0, -1}},
        {{ActionType::recv_activation, 0, 0, 0, 0}, {ActionType::forward, 0, 0, 0, -1}},
    };
    const SimResult r = nb::simulate(plans, SimCosts{});
    CHECK(r.deadlock);
    CHECK(contains(r.deadlock_reason, "stage 0 waits for the gradient of microbatch 0 from stage 1"));
    CHECK(contains(r.deadlock_reason, "stage 1 waits for the activation of microbatch 0 from stage 0"));
}

TEST_CASE("deadlock: a receive whose sender has finished, and a send of the wrong microbatch") {
    const std::vector<StagePlan> finished = {
        {{ActionType::forward, 0, 0, 0, -1}},
        {{ActionType::recv_activation, 0, 0, 0, 0}, {ActionType::forward, 0, 0, 0, -1}},
    };
    SimResult r = nb::simulate(finished, SimCosts{});
    CHECK(r.deadlock);
    CHECK(contains(r.deadlock_reason, "stage 1 waits for the activation of microbatch 0 from stage 0"));
    CHECK(contains(r.deadlock_reason, "stage 0 has finished"));
    CHECK(r.timeline[0].size() == 1);
    CHECK(r.timeline[1].empty());

    const std::vector<StagePlan> swapped = {
        {{ActionType::forward, 1, 0, 0, -1}, {ActionType::send_activation, 1, 0, 0, 1}},
        {{ActionType::recv_activation, 0, 0, 0, 0}, {ActionType::forward, 0, 0, 0, -1}},
    };
    r = nb::simulate(swapped, SimCosts{});
    CHECK(r.deadlock);
    CHECK(contains(r.deadlock_reason, "but stage 0 sent microbatch 1 next"));
}

TEST_CASE("a transfer naming an invalid peer is rejected") {
    const std::vector<StagePlan> plans = {{{ActionType::send_activation, 0, 0, 0, 0}}};
    CHECK_THROWS_AS(nb::simulate(plans, SimCosts{}), std::invalid_argument);
}

TEST_CASE("P = 64, m = 512, 3 steps: every schedule builds and simulates in well under a second") {
    for (ScheduleKind kind : {ScheduleKind::one_f_one_b, ScheduleKind::two_bw, ScheduleKind::pipedream,
                              ScheduleKind::gpipe}) {
        const auto begin = std::chrono::steady_clock::now();
        const auto plans = nb::build_schedule(make_spec(kind, 64, 512, 3));
        const SimResult r = nb::simulate(plans, SimCosts{});
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
        MESSAGE(nb::schedule_kind_name(kind), ": ", seconds, " s");
        CHECK_FALSE(r.deadlock);
        CHECK(seconds < 1.0);
        if (kind == ScheduleKind::one_f_one_b)
            CHECK(std::abs(r.bubble_fraction - 63.0 / (512 + 63)) < 1e-9);
    }
}

TEST_CASE("costs: forward must be positive, the others non-negative, each error naming its flag") {
    auto message = [](const SimCosts& c) {
        try {
            c.validate();
        } catch (const nb::UsageError& e) {
            return std::string(e.what());
        }
        return std::string();
    };
    SimCosts c;
    CHECK(message(c) == "");
    c.forward_ms = 0;
    CHECK(contains(message(c), "--forward-ms must be positive"));
    c = SimCosts{};
    c.p2p_ms = -1;
    CHECK(contains(message(c), "--p2p-ms must be >= 0"));
    c = SimCosts{};
    c.backward_input_ms = -0.5;
    CHECK(contains(message(c), "--backward-input-ms must be >= 0"));
}

TEST_CASE("timeline text: the 1f1b grid for p = 2, m = 2, drawn exactly") {
    const SimCosts costs;
    const SimResult r = simulate_spec(make_spec(ScheduleKind::one_f_one_b, 2, 2, 1), costs);
    const std::string text = nb::render_timeline(r, costs);
    const std::string expected_rows =
        "ms       0\n"
        "stage 0: F0 F1 .  .  B0--- .  B1---|\n"
        "stage 1: .  F0 B0--- F1 B1--- .  . |\n";  // its step waits for stage 0's: the global clip's all-gather
    CHECK(contains(text, expected_rows));
    CHECK(contains(text, "one column = 1 ms"));
}

TEST_CASE("timeline text: an optimizer step with a cost is drawn as S<version>") {
    SimCosts costs;
    costs.optimizer_ms = 1;
    const SimResult r = simulate_spec(make_spec(ScheduleKind::gpipe, 1, 2, 2), costs);
    CHECK(contains(nb::render_timeline(r, costs), "stage 0: F0 F1 B0--- B1--- S1 F2 F3 B2--- B3--- S2\n"));
}

TEST_CASE("timeline text: too wide becomes occupancy bars; too many stages a one-line note") {
    const SimCosts costs;
    const SimResult wide = simulate_spec(make_spec(ScheduleKind::one_f_one_b, 4, 512, 1), costs);
    const std::string bars = nb::render_timeline(wide, costs);
    CHECK(contains(bars, "too long to draw by column"));
    CHECK_FALSE(contains(bars, "F511"));
    // One character = 15.45 ms. Stage 0 idles 6 ms while the pipeline fills (first slice 61% busy: '+'), then
    // only 1 ms per cool-down backward: '#' everywhere else.
    const std::string row0 = "stage 0: +" + std::string(99, '#') + "\n";
    CHECK(contains(bars, row0));
    CHECK(bars.size() < 4 * 120 + 200);

    const SimResult tall = simulate_spec(make_spec(ScheduleKind::one_f_one_b, 65, 1, 1), costs);
    const std::string note = nb::render_timeline(tall, costs);
    CHECK(contains(note, "65 stages are too many to draw"));
    CHECK(note.find('\n') == note.size() - 1);
}

TEST_CASE("simulate: the replicas' gradient sum, costed by alpha-beta, delays each step by what is exposed") {
    // 1 Gbit over 1 Gbit/s, 2 replicas, no latency: 2 (D-1)/D of it, 1 s; latency adds 2 (D-1) of it.
    CHECK(replica_sum_cost_ms(1.25e8, 2, 1, 0) == doctest::Approx(1000));
    CHECK(replica_sum_cost_ms(1.25e8, 4, 1, 10) == doctest::Approx(1500 + 6 * 0.01));
    CHECK(replica_sum_cost_ms(1e9, 1, 0, 0) == 0);  // one replica: nothing to sum, any link
    CHECK_THROWS_AS(replica_sum_cost_ms(1, 2, 0, 0), UsageError);
    CHECK_THROWS_AS(replica_sum_cost_ms(1, 2, 1, -1), UsageError);
    for (ScheduleKind kind : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b, ScheduleKind::two_bw, ScheduleKind::zb_h1}) {
        CAPTURE(schedule_kind_name(kind));
        ScheduleSpec spec{kind, 2, 4, 3};
        SimCosts costs;
        costs.step_barrier = steps_synchronize(kind);
        const SimResult alone = nb::simulate(nb::build_schedule(spec), costs, spec.placement());
        costs.replica_sum_ms = 0.5;
        const SimResult summed = nb::simulate(nb::build_schedule(spec), costs, spec.placement());
        REQUIRE_FALSE(summed.deadlock);
        CHECK(alone.replica_wait_ms == std::vector<double>{0, 0});
        // Every step's sum starts at its last backward and the step waits for it: 3 steps x 0.5 ms per stage.
        for (double w : summed.replica_wait_ms) CHECK(w == doctest::Approx(1.5));
        CHECK(summed.makespan_ms > alone.makespan_ms);
        CHECK(summed.makespan_ms <= alone.makespan_ms + 1.5 + 1e-9);
    }
}

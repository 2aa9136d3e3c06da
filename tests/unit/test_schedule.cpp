// Schedules as data: for every schedule, stage count and microbatch count, the action lists obey the rules of
// docs/DESIGN.md section 2, checked here from the lists themselves and against the version table written out again.
#include <doctest/doctest.h>

#include "tests/unit/test_util.h"

#include <algorithm>
#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "src/core/error.h"
#include "pipeline/schedule/schedule.h"
#include "pipeline/schedule/simulate.h"

using namespace nb;
using namespace nb::test;

namespace {

constexpr ScheduleKind kAllKinds[] = {ScheduleKind::gpipe, ScheduleKind::one_f_one_b, ScheduleKind::two_bw,
                                      ScheduleKind::pipedream, ScheduleKind::zb_h1, ScheduleKind::zb_v};

ScheduleSpec make_spec(ScheduleKind kind, int p, int64_t m, int64_t steps, int64_t sync_start = 0,
                       int64_t sync_cooldown = 0) {
    return {.kind = kind, .stages = p, .microbatches = m, .steps = steps, .sync_start = sync_start,
            .sync_cooldown = sync_cooldown};
}

// The grid: P in {1,2,3,4,8}, m in {1, P, 2P, 3P+1} (2bw needs m >= P), steps in {1, 3}.
void for_each_design_case(const std::function<void(const ScheduleSpec&)>& check) {
    for (ScheduleKind kind : kAllKinds)
        for (int p : {1, 2, 3, 4, 8})
            for (int64_t m : {int64_t{1}, int64_t{p}, int64_t{2 * p}, int64_t{3 * p + 1}}) {
                if (kind == ScheduleKind::two_bw && m < p) continue;
                for (int64_t steps : {1, 3}) check(make_spec(kind, p, m, steps));
            }
}

// Cases with --sync-start / --sync-cooldown (counted in optimizer steps; pipedream: one per microbatch).
std::vector<ScheduleSpec> sync_cases() {
    std::vector<ScheduleSpec> cases;
    for (ScheduleKind kind : {ScheduleKind::two_bw, ScheduleKind::pipedream})
        for (int p : {2, 3, 4}) {
            const int64_t m = p, steps = 6;
            const int64_t n = kind == ScheduleKind::pipedream ? steps * m : steps;
            for (auto [k, kc] : {std::pair<int64_t, int64_t>{1, 0}, {2, 1}, {0, 2}, {3, 3}, {n, 0}, {0, n}, {1, 1}})
                if (k + kc <= n) cases.push_back(make_spec(kind, p, m, steps, k, kc));
        }
    // pipedream with m = 1 and several microbatches per iteration, sync at both ends.
    cases.push_back(make_spec(ScheduleKind::pipedream, 4, 1, 12, 3, 2));
    cases.push_back(make_spec(ScheduleKind::pipedream, 4, 3, 4, 5, 4));
    return cases;
}

std::string name_of(const ScheduleSpec& s) {
    return std::string(nb::schedule_kind_name(s.kind)) + " p=" + std::to_string(s.stages) +
           " m=" + std::to_string(s.microbatches) + " steps=" + std::to_string(s.steps) +
           " sync_start=" + std::to_string(s.sync_start) + " sync_cooldown=" + std::to_string(s.sync_cooldown);
}

// ---- the table of docs/DESIGN.md section 2, written out again independently of pipeline/schedule/schedule.cpp ----

int64_t optimizer_steps_of(const ScheduleSpec& s) {
    return s.kind == ScheduleKind::pipedream ? s.steps * s.microbatches : s.steps;
}
int64_t step_of(const ScheduleSpec& s, int64_t mb) {
    return s.kind == ScheduleKind::pipedream ? mb : mb / s.microbatches;
}
bool synchronous_step(const ScheduleSpec& s, int64_t t) {
    if (s.kind == ScheduleKind::gpipe || s.kind == ScheduleKind::one_f_one_b || s.kind == ScheduleKind::zb_h1 ||
        s.kind == ScheduleKind::zb_v)
        return true;
    return t < s.sync_start || t >= optimizer_steps_of(s) - s.sync_cooldown;
}
int64_t expected_version(const ScheduleSpec& s, int stage, int64_t mb) {
    const int64_t t = step_of(s, mb);
    if (synchronous_step(s, t)) return t;                         // 1f1b: g_t at W_t
    if (s.kind == ScheduleKind::two_bw) return t == 0 ? 0 : t - 1;  // g_t at W_{t-1}, as if always async
    const int64_t first_async = s.sync_start;                     // pipedream: v_s(i) = max(K', i-(p-1-s))
    return std::max(first_async, mb - (s.stages - 1 - stage));
}

// Forward, backward, B or W: an action that computes with a weight version.
bool is_fb(const Action& a) { return nb::uses_weights(a.type); }
bool is_split(const ScheduleSpec& s) { return s.kind == ScheduleKind::zb_h1 || s.kind == ScheduleKind::zb_v; }

// ---- checks on the lists: `plans` are the virtual stages' lists (virtual_stage_plans), one per part of the model;
// with one chunk per rank, the ranks' lists ----

// Forwards and backwards: each microbatch exactly once each, in microbatch order, backward after forward,
// with the step it belongs to and the version of the table; the backward uses the forward's (stashed) version.
// A split backward (zb-h1): B in place of the backward, and W once per microbatch, after its B, in microbatch order.
void check_compute(const ScheduleSpec& spec, const std::vector<StagePlan>& plans) {
    const int64_t n = spec.total_microbatches();
    const ActionType backward = is_split(spec) ? ActionType::backward_input : ActionType::backward;
    for (int s = 0; s < static_cast<int>(plans.size()); ++s) {
        CAPTURE(s);
        std::vector<int64_t> forwards, backwards, weights;
        std::map<int64_t, int64_t> forward_version;
        for (const Action& a : plans[s]) {
            if (!is_fb(a)) continue;
            CHECK(a.step == step_of(spec, a.microbatch));
            CHECK(a.peer == -1);
            CHECK(a.version == expected_version(spec, s, a.microbatch));
            if (a.type == ActionType::forward) {
                forwards.push_back(a.microbatch);
                forward_version[a.microbatch] = a.version;
            } else if (a.type == backward) {
                REQUIRE(forward_version.count(a.microbatch) == 1);  // backward after its forward
                CHECK(a.version == forward_version[a.microbatch]);
                backwards.push_back(a.microbatch);
            } else {
                REQUIRE(a.type == ActionType::backward_weight);
                REQUIRE(is_split(spec));
                CHECK(std::count(backwards.begin(), backwards.end(), a.microbatch) == 1);  // W after its B
                CHECK(a.version == forward_version[a.microbatch]);
                weights.push_back(a.microbatch);
            }
        }
        REQUIRE(forwards.size() == static_cast<size_t>(n));
        REQUIRE(backwards.size() == static_cast<size_t>(n));
        REQUIRE(weights.size() == static_cast<size_t>(is_split(spec) ? n : 0));
        for (int64_t i = 0; i < n; ++i) {
            CHECK(forwards[i] == i);   // every microbatch once, in data order
            CHECK(backwards[i] == i);  // gradients accumulate in microbatch order
            if (is_split(spec)) CHECK(weights[i] == i);
        }
    }
}

// Optimizer steps: one per step, in order, producing version t+1, after the backward of every microbatch of
// step t; and every forward uses a version that this stage has already produced.
void check_optimizer_steps(const ScheduleSpec& spec, const std::vector<StagePlan>& plans) {
    for (int s = 0; s < static_cast<int>(plans.size()); ++s) {
        CAPTURE(s);
        int64_t next_step = 0, newest = 0;
        std::map<int64_t, int64_t> backwards_of_step;
        for (const Action& a : plans[s]) {
            if (nb::ends_microbatch(a.type)) ++backwards_of_step[a.step];  // backward or W: summed
            if (a.type == ActionType::forward) CHECK(a.version <= newest);
            if (a.type == ActionType::optimizer_step) {
                CHECK(a.step == next_step);
                CHECK(a.version == a.step + 1);
                CHECK(a.microbatch == -1);
                CHECK(a.peer == -1);
                CHECK(backwards_of_step[a.step] == spec.microbatches_per_step());
                newest = a.version;
                ++next_step;
            }
        }
        CHECK(next_step == optimizer_steps_of(spec));
    }
}

// Receives right before, sends right after their compute, with the right peer; one per forward/backward.
void check_transfers_around_compute(const ScheduleSpec& spec, const std::vector<StagePlan>& plans) {
    const int p = static_cast<int>(plans.size());
    for (int s = 0; s < p; ++s) {
        CAPTURE(s);
        const StagePlan& plan = plans[s];
        int64_t transfers = 0;
        for (size_t k = 0; k < plan.size(); ++k) {
            const Action& a = plan[k];
            auto expect_at = [&](size_t at, ActionType type, int peer) {
                REQUIRE(at < plan.size());
                const Action& b = plan[at];
                CHECK(b.type == type);
                CHECK(b.microbatch == a.microbatch);
                CHECK(b.peer == peer);
                CHECK(b.step == a.step);
                CHECK(b.version == a.version);
            };
            if (a.type == ActionType::forward) {
                if (s > 0) REQUIRE(k > 0);
                if (s > 0) expect_at(k - 1, ActionType::recv_activation, s - 1);
                if (s < p - 1) expect_at(k + 1, ActionType::send_activation, s + 1);
            }
            if (a.type == ActionType::backward || a.type == ActionType::backward_input) {
                if (s < p - 1) REQUIRE(k > 0);
                if (s < p - 1) expect_at(k - 1, ActionType::recv_gradient, s + 1);
                if (s > 0) expect_at(k + 1, ActionType::send_gradient, s - 1);
            }
            if (!nb::is_compute(a.type)) ++transfers;
        }
        const int64_t per_direction = spec.total_microbatches();
        CHECK(transfers == per_direction * 2 * ((s > 0) + (s < p - 1)));
    }
}

// Every send matched by exactly one receive on the peer, in the same order.
void check_sends_match_receives(const ScheduleSpec& spec, const std::vector<StagePlan>& plans) {
    const int p = static_cast<int>(plans.size());
    // key (from, to, gradient?) -> microbatches in order
    std::map<std::tuple<int, int, bool>, std::vector<int64_t>> sent, received;
    for (int s = 0; s < p; ++s)
        for (const Action& a : plans[s]) {
            if (a.type == ActionType::send_activation) sent[{s, a.peer, false}].push_back(a.microbatch);
            if (a.type == ActionType::send_gradient) sent[{s, a.peer, true}].push_back(a.microbatch);
            if (a.type == ActionType::recv_activation) received[{a.peer, s, false}].push_back(a.microbatch);
            if (a.type == ActionType::recv_gradient) received[{a.peer, s, true}].push_back(a.microbatch);
        }
    CHECK(sent.size() == received.size());
    CHECK(sent.size() == static_cast<size_t>(2 * (p - 1)));
    for (const auto& [channel, mbs] : sent) {
        CAPTURE(std::get<0>(channel));
        CAPTURE(std::get<1>(channel));
        CHECK(received[channel] == mbs);
    }
}

// A synchronous step runs alone: while any of its microbatches is in flight, no other step's is; and no
// forward of a step starts while a microbatch of a step of the other kind (sync/async) is in flight.
void check_flushes(const ScheduleSpec& spec, const std::vector<StagePlan>& plans) {
    for (int s = 0; s < static_cast<int>(plans.size()); ++s) {
        CAPTURE(s);
        std::map<int64_t, int64_t> in_flight_by_step;
        for (const Action& a : plans[s]) {
            if (a.type == ActionType::forward) {
                const bool sync = synchronous_step(spec, a.step);
                for (const auto& [t, count] : in_flight_by_step) {
                    if (count == 0) continue;
                    if (sync) CHECK(t == a.step);
                    CHECK(synchronous_step(spec, t) == sync);
                }
                ++in_flight_by_step[a.step];
            }
            if (nb::ends_microbatch(a.type)) --in_flight_by_step[a.step];
        }
    }
}

// The warm-up of 1F1B: per step, stage s runs min(p-s, m) forwards before that step's first backward
// (min(p-s-1, m) warm-up forwards, then the first forward of the steady state).
void check_one_f_one_b_warmup(const ScheduleSpec& spec, const std::vector<StagePlan>& plans) {
    for (int s = 0; s < spec.stages; ++s) {
        CAPTURE(s);
        std::map<int64_t, int64_t> forwards_before_first_backward;
        std::map<int64_t, bool> backward_seen;
        for (const Action& a : plans[s]) {
            if (a.type == ActionType::forward && !backward_seen[a.step]) ++forwards_before_first_backward[a.step];
            if (a.type == ActionType::backward) backward_seen[a.step] = true;
        }
        for (const auto& [t, count] : forwards_before_first_backward)
            CHECK(count == std::min<int64_t>(spec.stages - s, spec.microbatches));
    }
}

void check_everything(const ScheduleSpec& spec) {
    CAPTURE(name_of(spec));
    const std::vector<StagePlan> plans = nb::build_schedule(spec);
    REQUIRE(plans.size() == static_cast<size_t>(spec.stages));
    const std::vector<StagePlan> parts = nb::virtual_stage_plans(plans, spec.placement());
    REQUIRE(parts.size() == static_cast<size_t>(spec.virtual_stage_count()));
    check_compute(spec, parts);
    check_optimizer_steps(spec, parts);
    check_transfers_around_compute(spec, parts);
    check_sends_match_receives(spec, parts);
    check_flushes(spec, parts);
    const nb::SimResult sim = nb::simulate(plans, nb::SimCosts{}, spec.placement());
    CHECK_FALSE(sim.deadlock);
    CHECK(sim.deadlock_reason == "");
}

}  // namespace

TEST_CASE("every schedule on the grid: compute, versions, steps, transfers, flushes, no deadlock") {
    int cases = 0;
    for_each_design_case([&](const ScheduleSpec& spec) {
        check_everything(spec);
        ++cases;
    });
    CHECK(cases == 5 * (5 * 4 * 2) + (4 + 4 * 3) * 2);  // 2bw skips m = 1 for p > 1
}

TEST_CASE("sync start and cooldown: 1f1b steps with flushes, async versions as if always async") {
    for (const ScheduleSpec& spec : sync_cases()) check_everything(spec);
}

TEST_CASE("the versions of sync start / cooldown, spelled out for 2bw and pipedream") {
    // 2bw, 6 steps, sync start 2, cooldown 1: steps 0, 1 use W0, W1 (sync); 2, 3, 4 use W1, W2, W3; 5 uses W5.
    const ScheduleSpec bw = make_spec(ScheduleKind::two_bw, 3, 3, 6, 2, 1);
    const int64_t bw_expected[] = {0, 1, 1, 2, 3, 5};
    for (int s = 0; s < 3; ++s)
        for (int64_t t = 0; t < 6; ++t)
            for (int64_t i = 0; i < 3; ++i) CHECK(nb::weight_version(bw, s, t * 3 + i) == bw_expected[t]);
    // pipedream, p = 3, 8 microbatches, sync start 2, cooldown 2: microbatches 2..5 async with K' = 2.
    const ScheduleSpec pd = make_spec(ScheduleKind::pipedream, 3, 1, 8, 2, 2);
    const int64_t pd_expected[3][8] = {{0, 1, 2, 2, 2, 3, 6, 7},   // stage 0: delay 2
                                       {0, 1, 2, 2, 3, 4, 6, 7},   // stage 1: delay 1
                                       {0, 1, 2, 3, 4, 5, 6, 7}};  // stage 2: delay 0
    for (int s = 0; s < 3; ++s)
        for (int64_t i = 0; i < 8; ++i) CHECK(nb::weight_version(pd, s, i) == pd_expected[s][i]);
    // And the built plans carry exactly these versions.
    const auto plans = nb::build_schedule(pd);
    for (int s = 0; s < 3; ++s)
        for (const Action& a : plans[s])
            if (is_fb(a)) CHECK(a.version == pd_expected[s][a.microbatch]);
}

TEST_CASE("1f1b: min(p-s-1, m) warm-up forwards; in flight at stage s is min(p-s, m); gpipe holds all m") {
    for_each_design_case([](const ScheduleSpec& spec) {
        CAPTURE(name_of(spec));
        const auto plans = nb::build_schedule(spec);
        for (int s = 0; s < spec.stages; ++s) {
            CAPTURE(s);
            const int64_t in_flight = nb::max_in_flight(plans, s);
            const int64_t bound = spec.stages - s;
            switch (spec.kind) {
                case ScheduleKind::gpipe: CHECK(in_flight == spec.microbatches); break;
                case ScheduleKind::one_f_one_b: CHECK(in_flight == std::min(bound, spec.microbatches)); break;
                // Held until W, which lags B by s: p on every stage, 1f1b's stage 0 (its peak).
                case ScheduleKind::zb_h1: CHECK(in_flight == std::min<int64_t>(spec.stages, spec.microbatches)); break;
                // Counted in chunks, each about half a stage's stash: 2p of them once the V's warm-up is whole
                // (m >= 2p-1), p stages' worth, 1f1b's stage 0; fewer with fewer microbatches.
                case ScheduleKind::zb_v:
                    if (spec.microbatches >= 2 * spec.stages - 1) CHECK(in_flight == 2 * spec.stages);
                    CHECK(in_flight <= 2 * std::min<int64_t>(spec.stages, spec.microbatches));
                    break;
                default: CHECK(in_flight == std::min(bound, spec.total_microbatches())); break;
            }
        }
        if (spec.kind == ScheduleKind::one_f_one_b) check_one_f_one_b_warmup(spec, plans);
    });
}

TEST_CASE("weight versions held: 1 (gpipe, 1f1b), 2 (2bw), p-s (pipedream once steady)") {
    for_each_design_case([](const ScheduleSpec& spec) {
        CAPTURE(name_of(spec));
        const auto plans = nb::build_schedule(spec);
        const int p = spec.stages;
        for (int s = 0; s < p; ++s) {
            CAPTURE(s);
            const int64_t held = nb::max_versions_held(plans, s);
            switch (spec.kind) {
                case ScheduleKind::gpipe:
                case ScheduleKind::one_f_one_b: CHECK(held == 1); break;
                case ScheduleKind::two_bw: CHECK(held == (spec.steps >= 2 ? 2 : 1)); break;
                case ScheduleKind::pipedream:
                    if (spec.total_microbatches() >= 2 * p - 1)
                        CHECK(held == p - s);
                    else
                        CHECK(held <= p - s);
                    break;
            }
        }
    });
    for (const ScheduleSpec& spec : sync_cases()) {
        CAPTURE(name_of(spec));
        const auto plans = nb::build_schedule(spec);
        for (int s = 0; s < spec.stages; ++s) {
            const int64_t held = nb::max_versions_held(plans, s);
            CHECK(held >= 1);
            CHECK(held <= (spec.kind == ScheduleKind::two_bw ? 2 : spec.stages - s));
        }
    }
}

TEST_CASE("max_versions_held counts the versions a hand-made stage still needs") {
    // Forward mb 0 on W0, step to W1, forward mb 1 on W0 again (as 2bw does), backward both: W0 and W1 held.
    const std::vector<StagePlan> plans = {{
        {ActionType::forward, 0, 0, 0, -1},
        {ActionType::backward, 0, 0, 0, -1},
        {ActionType::optimizer_step, -1, 0, 1, -1},
        {ActionType::forward, 1, 1, 0, -1},
        {ActionType::backward, 1, 1, 0, -1},
        {ActionType::optimizer_step, -1, 1, 2, -1},
        {ActionType::forward, 2, 2, 2, -1},
        {ActionType::backward, 2, 2, 2, -1},
    }};
    CHECK(nb::max_versions_held(plans, 0) == 2);
    CHECK(nb::max_in_flight(plans, 0) == 1);
    CHECK_THROWS_AS(nb::max_versions_held(plans, 1), std::out_of_range);
}

TEST_CASE("2bw: each microbatch uses the same version on every stage") {
    const auto spec = make_spec(ScheduleKind::two_bw, 4, 8, 5);
    const auto plans = nb::build_schedule(spec);
    std::map<int64_t, int64_t> version_of_mb;
    for (const StagePlan& plan : plans)
        for (const Action& a : plan)
            if (is_fb(a)) {
                auto [it, fresh] = version_of_mb.emplace(a.microbatch, a.version);
                CHECK(it->second == a.version);
            }
    CHECK(version_of_mb.size() == 40);
}

TEST_CASE("pipedream: a forward always uses the stage's newest weights (the stash is for the backward)") {
    for (int p : {2, 3, 5}) {
        const auto spec = make_spec(ScheduleKind::pipedream, p, 2, 7);
        const auto plans = nb::build_schedule(spec);
        for (int s = 0; s < p; ++s) {
            int64_t newest = 0;
            for (const Action& a : plans[s]) {
                if (a.type == ActionType::optimizer_step) newest = a.version;
                if (a.type == ActionType::forward) CHECK(a.version == newest);
            }
        }
    }
}

TEST_CASE("names: parse and format round-trip; an unknown name names --schedule and the valid ones") {
    for (ScheduleKind kind : kAllKinds) CHECK(nb::parse_schedule_kind(nb::schedule_kind_name(kind)) == kind);
    CHECK(nb::schedule_kind_name(ScheduleKind::one_f_one_b) == "1f1b");
    CHECK(nb::schedule_kind_name(ScheduleKind::two_bw) == "2bw");
    const std::string e = usage_error([] { nb::parse_schedule_kind("zerobubble"); });
    CHECK(contains(e, "--schedule"));
    CHECK(contains(e, "zerobubble"));
    CHECK(contains(e, "gpipe, 1f1b, 2bw, pipedream, zb-h1, zb-v"));
    CHECK(nb::describe({ActionType::backward_input, 3, 0, 0, -1}) == "B3 input (step 0, W0)");
    CHECK(nb::describe({ActionType::backward_weight, 3, 0, 0, -1}) == "W3 weight (step 0, W0)");
    CHECK(nb::describe({ActionType::forward, 3, 0, 0, -1}) == "F3 (step 0, W0)");
    CHECK(nb::describe({ActionType::recv_gradient, 3, 0, 0, 2}) == "recv_gradient mb 3 from stage 2");
    CHECK(nb::describe({ActionType::optimizer_step, -1, 4, 5, -1}) == "optimizer_step 4 -> W5");
}

// ZB-H1 (Qi et al. 2024, section 3.1): stage s runs 1f1b's warm-up forwards, then F and B alternately with W
// k-s after B k, then the B and W left, then the W left; at most s+1 W pending after a B (so at most p).
TEST_CASE("zb-h1: 1f1b's forwards and B, each W s computes after its B, at most s+1 pending") {
    for (int p : {1, 2, 3, 4, 8})
        for (int64_t m : {int64_t{1}, int64_t{p}, int64_t{2 * p}, int64_t{3 * p + 1}}) {
            const ScheduleSpec spec = make_spec(ScheduleKind::zb_h1, p, m, 2);
            CAPTURE(name_of(spec));
            const auto plans = nb::build_schedule(spec);
            const auto one_f_one_b = nb::build_schedule(make_spec(ScheduleKind::one_f_one_b, p, m, 2));
            for (int s = 0; s < p; ++s) {
                CAPTURE(s);
                // F and B in 1f1b's order (W taken out, B in place of the backward).
                std::vector<std::pair<bool, int64_t>> fb, reference_fb;
                for (const Action& a : plans[s])
                    if (a.type == ActionType::forward || a.type == ActionType::backward_input)
                        fb.push_back({a.type == ActionType::forward, a.microbatch});
                for (const Action& a : one_f_one_b[s])
                    if (a.type == ActionType::forward || a.type == ActionType::backward)
                        reference_fb.push_back({a.type == ActionType::forward, a.microbatch});
                CHECK(fb == reference_fb);
                int64_t b_done = 0, w_done = 0, most_pending = 0;
                for (const Action& a : plans[s]) {
                    if (a.type == ActionType::backward_input) most_pending = std::max(most_pending, ++b_done - w_done);
                    if (a.type != ActionType::backward_weight) continue;
                    ++w_done;
                    // W k runs right after B k+s, or, when there is no B k+s in its step, after the step's last B.
                    const int64_t first = a.step * m, k = a.microbatch - first;
                    CHECK(b_done - first == std::min<int64_t>(k + s + 1, m));
                }
                CHECK(most_pending <= std::min<int64_t>(s + 1, m));
            }
        }
}

// Interleaved 1F1B (Megatron-LM): chunk c of rank r is part c p + r. Each part sees every microbatch's forward and
// backward once, in microbatch order; its messages go to the parts next to it; per rank the forwards of a group of
// p microbatches run chunk by chunk; each chunk steps once per step after its last backward.
TEST_CASE("interleaved 1f1b: every part's compute in order, messages between neighbouring parts, one step per chunk") {
    for (int p : {1, 2, 4})
        for (int v : {2, 3})
            for (int64_t m : {int64_t{p}, int64_t{2 * p}, int64_t{4 * p}}) {
                ScheduleSpec spec = make_spec(ScheduleKind::one_f_one_b, p, m, 2);
                spec.virtual_stages = v;
                CAPTURE(name_of(spec));
                CAPTURE(v);
                const auto plans = nb::build_schedule(spec);
                const int parts = p * v;
                std::map<int, std::vector<int64_t>> forwards, backwards;  // by part
                std::map<int, int64_t> steps;
                std::map<std::tuple<int, int, bool>, std::vector<int64_t>> sent, received;
                for (int r = 0; r < p; ++r)
                    for (const Action& a : plans[r]) {
                        REQUIRE(a.chunk >= 0);
                        REQUIRE(a.chunk < v);
                        const int part = a.chunk * p + r;
                        if (a.type == ActionType::forward) forwards[part].push_back(a.microbatch);
                        if (a.type == ActionType::backward) backwards[part].push_back(a.microbatch);
                        if (a.type == ActionType::optimizer_step) ++steps[part];
                        if (a.type == ActionType::send_activation || a.type == ActionType::send_gradient) {
                            CHECK(a.peer == part + (a.type == ActionType::send_activation ? 1 : -1));
                            sent[{part, a.peer, a.type == ActionType::send_gradient}].push_back(a.microbatch);
                        }
                        if (a.type == ActionType::recv_activation || a.type == ActionType::recv_gradient) {
                            CHECK(a.peer == part + (a.type == ActionType::recv_activation ? -1 : 1));
                            received[{a.peer, part, a.type == ActionType::recv_gradient}].push_back(a.microbatch);
                        }
                    }
                std::vector<int64_t> all(static_cast<size_t>(spec.total_microbatches()));
                for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int64_t>(i);
                for (int part = 0; part < parts; ++part) {
                    CAPTURE(part);
                    CHECK(forwards[part] == all);
                    CHECK(backwards[part] == all);
                    CHECK(steps[part] == spec.steps);
                }
                CHECK(sent == received);
                CHECK(sent.size() == static_cast<size_t>(2 * (parts - 1)));
                CHECK_FALSE(nb::simulate(plans, nb::SimCosts{}, spec.placement()).deadlock);
                for (int r = 0; r < p; ++r) {
                    CHECK(nb::max_versions_held(plans, r) == 1);  // synchronous: one version per chunk
                    // Megatron's order: the forwards of microbatches [g p, (g+1) p) chunk by chunk.
                    std::vector<std::pair<int, int64_t>> order;
                    for (const Action& a : plans[r])
                        if (a.type == ActionType::forward && a.step == 0) order.push_back({a.chunk, a.microbatch});
                    for (size_t k = 0; k < order.size(); ++k) {
                        CHECK(order[k].first == static_cast<int>((k / p) % v));
                        CHECK(order[k].second == static_cast<int64_t>((k / (p * v)) * p + k % p));
                    }
                }
            }
    ScheduleSpec bad = make_spec(ScheduleKind::one_f_one_b, 4, 6, 1);
    bad.virtual_stages = 2;
    CHECK(contains(usage_error([&] { nb::build_schedule(bad); }), "a multiple of the 4 stages"));
    bad = make_spec(ScheduleKind::two_bw, 2, 4, 1);
    bad.virtual_stages = 2;
    CHECK(contains(usage_error([&] { nb::build_schedule(bad); }), "needs --schedule 1f1b, not 2bw"));
    bad.virtual_stages = 0;
    CHECK(contains(usage_error([&] { nb::build_schedule(bad); }), "--virtual-stages must be positive, got 0"));
}

// ZB-V (Qi et al. 2024): rank r runs part r and part 2p-1-r; the V's turn (part p-1 to part p) stays on rank p-1.
// Its order, stated again from the paper's warm-up for m >= 2p-1: 2(p-r)-1 forwards on chunk 0, then r times a
// forward on chunk 1 and one on chunk 0, then chunk 1's first B and W right after its forward. Each rank holds at
// most 2p chunk stashes (p microbatches, 1f1b's stage 0), and each W follows its own B.
TEST_CASE("zb-v: the V placement, the paper's warm-up, W after its B, at most 2p chunk stashes per rank") {
    for (int p : {1, 2, 3, 4, 8})
        for (int64_t m : {int64_t{1}, int64_t{p}, int64_t{2 * p - 1}, int64_t{2 * p}, int64_t{3 * p + 1}}) {
            const ScheduleSpec spec = make_spec(ScheduleKind::zb_v, p, m, 2);
            CAPTURE(name_of(spec));
            const StagePlacement placement = spec.placement();
            CHECK(placement.chunks == 2);
            CHECK(spec.virtual_stage_count() == 2 * p);
            const auto plans = nb::build_schedule(spec);
            for (int r = 0; r < p; ++r) {
                CAPTURE(r);
                CHECK(placement.part(r, 0) == r);
                CHECK(placement.part(r, 1) == 2 * p - 1 - r);
                CHECK(placement.rank_of(placement.part(r, 1)) == r);
                CHECK(nb::max_in_flight(plans, r) <= 2 * p);
                std::vector<std::pair<ActionType, int>> first_step;  // (type, chunk) of step 0's computes
                std::map<std::pair<int, int64_t>, int> b_done;       // (chunk, microbatch) -> B seen
                for (const Action& a : plans[r]) {
                    if (a.type == ActionType::backward_input) ++b_done[{a.chunk, a.microbatch}];
                    if (a.type == ActionType::backward_weight) CHECK(b_done[{a.chunk, a.microbatch}] == 1);
                    if (a.type == ActionType::forward && a.microbatch == p - 1 && a.chunk == 0 && r == p - 1)
                        CHECK(a.peer == -1);
                    if (a.step == 0 && nb::uses_weights(a.type)) first_step.push_back({a.type, a.chunk});
                }
                if (m < 2 * p - 1) continue;
                size_t k = 0;
                for (int i = 0; i < 2 * (p - r) - 1; ++i, ++k) CHECK(first_step.at(k) == std::pair{ActionType::forward, 0});
                for (int i = 0; i < r; ++i, k += 2) {
                    CHECK(first_step.at(k) == std::pair{ActionType::forward, 1});
                    CHECK(first_step.at(k + 1) == std::pair{ActionType::forward, 0});
                }
                CHECK(first_step.at(k) == std::pair{ActionType::forward, 1});
                CHECK(first_step.at(k + 1) == std::pair{ActionType::backward_input, 1});
                CHECK(first_step.at(k + 2) == std::pair{ActionType::backward_weight, 1});
            }
            // The turn of the V: part p-1 sends its activation to part p, both on rank p-1.
            bool turn_seen = false;
            for (const Action& a : plans[p - 1])
                if (a.type == ActionType::send_activation && a.chunk == 0) {
                    CHECK(a.peer == p);
                    turn_seen = true;
                }
            CHECK(turn_seen);
        }
    ScheduleSpec bad = make_spec(ScheduleKind::zb_v, 2, 4, 1);
    bad.virtual_stages = 3;
    CHECK(contains(usage_error([&] { nb::build_schedule(bad); }), "--virtual-stages must be 2 (or left out), got 3"));
    bad.virtual_stages = 2;
    CHECK(nb::build_schedule(bad) == nb::build_schedule(make_spec(ScheduleKind::zb_v, 2, 4, 1)));
}

TEST_CASE("placement: part and rank_of invert each other, for the loop and the V") {
    for (int p : {1, 2, 3, 5})
        for (int v : {1, 2, 3})
            for (PlacementShape shape : {PlacementShape::loop, PlacementShape::v}) {
                const StagePlacement placement{p, v, shape};
                std::vector<int> seen(static_cast<size_t>(p * v), 0);
                for (int r = 0; r < p; ++r)
                    for (int c = 0; c < v; ++c) {
                        const int part = placement.part(r, c);
                        REQUIRE(part >= 0);
                        REQUIRE(part < p * v);
                        ++seen[static_cast<size_t>(part)];
                        CHECK(placement.rank_of(part) == r);
                        CHECK(placement.chunk_of(part) == c);
                        CHECK(part / p == c);  // chunk c holds the c-th run of p parts, in either shape
                    }
                for (int n : seen) CHECK(n == 1);
                CHECK_THROWS_AS(placement.part(p, 0), std::out_of_range);
                CHECK_THROWS_AS(placement.rank_of(p * v), std::out_of_range);
            }
    CHECK(StagePlacement{4, 2, PlacementShape::loop}.part(0, 1) == 4);
    CHECK(StagePlacement{4, 2, PlacementShape::v}.part(0, 1) == 7);
}

TEST_CASE("validate: each impossible spec is a usage error naming its flag") {
    auto message = [](const ScheduleSpec& spec) { return usage_error([&] { nb::build_schedule(spec); }); };
    CHECK(contains(message(make_spec(ScheduleKind::one_f_one_b, 0, 4, 1)), "--stages must be positive, got 0"));
    CHECK(contains(message(make_spec(ScheduleKind::one_f_one_b, 2, 0, 1)), "--num-microbatches must be positive"));
    CHECK(contains(message(make_spec(ScheduleKind::one_f_one_b, 2, 2, 0)), "--train-iters must be positive"));
    const std::string bw = message(make_spec(ScheduleKind::two_bw, 4, 3, 2));
    CHECK(contains(bw, "--schedule 2bw needs --num-microbatches >= the number of stages (P)"));
    CHECK(contains(bw, "--num-microbatches 3 with 4 stages"));
    CHECK(message(make_spec(ScheduleKind::two_bw, 4, 4, 2)) == "");
    const std::string sync = message(make_spec(ScheduleKind::two_bw, 2, 2, 4, 3, 2));
    CHECK(contains(sync, "--sync-start 3"));
    CHECK(contains(sync, "--sync-cooldown 2"));
    CHECK(contains(sync, "4 optimizer steps"));
    CHECK(message(make_spec(ScheduleKind::two_bw, 2, 2, 4, 2, 2)) == "");
    // pipedream counts one optimizer step per microbatch: 2 iterations x 3 microbatches = 6 steps.
    CHECK(message(make_spec(ScheduleKind::pipedream, 2, 3, 2, 4, 2)) == "");
    CHECK(contains(message(make_spec(ScheduleKind::pipedream, 2, 3, 2, 4, 3)), "6 optimizer steps"));
    CHECK(contains(message(make_spec(ScheduleKind::pipedream, 2, 3, 2, -1, 0)), "--sync-start must be >= 0"));
    CHECK(contains(message(make_spec(ScheduleKind::gpipe, 2, 3, 2, 0, -1)), "--sync-cooldown must be >= 0"));
}

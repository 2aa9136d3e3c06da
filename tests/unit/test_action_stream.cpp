// The executor's lazily made action lists (pipeline/schedule/action_stream.h), version uses (version_uses.h) and
// memory peaks (part_peaks) against the whole run's expansion (build_schedule): every schedule, p in 1..4, m in
// 1..9 where the schedule allows it, sync start and cool-down, chunks; the first iterations and a window late in a
// longer run (a resumed run's first step, an early stop's end). D replicas run the same lists (each replica is a
// copy of the pipeline), so they need no case of their own.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <vector>

#include "pipeline/schedule/action_stream.h"
#include "pipeline/schedule/schedule.h"
#include "pipeline/schedule/version_uses.h"

using namespace nb;

namespace {

// The actions of `plan` whose steps are in [first, end).
StagePlan steps_between(const StagePlan& plan, int64_t first, int64_t end) {
    StagePlan kept;
    for (const Action& a : plan)
        if (a.step >= first && a.step < end) kept.push_back(a);
    return kept;
}

// The specs to check: each kind, p, m (and v, K, K_c) that validate, over `iterations`.
std::vector<ScheduleSpec> specs_of(int64_t iterations) {
    std::vector<ScheduleSpec> specs;
    for (ScheduleKind kind : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b, ScheduleKind::zb_h1, ScheduleKind::zb_v,
                              ScheduleKind::two_bw, ScheduleKind::pipedream})
        for (int p = 1; p <= 4; ++p)
            for (int64_t m = 1; m <= 9; ++m) {
                std::vector<ScheduleSpec> shapes;
                const ScheduleSpec plain{kind, p, m, iterations};
                if (kind == ScheduleKind::one_f_one_b) {
                    shapes.push_back(plain);
                    for (int v : {2, 3})
                        if (m % p == 0) shapes.push_back({kind, p, m, iterations, 0, 0, v});
                } else if (is_asynchronous(kind)) {
                    for (int64_t k : {0, 1, 3})
                        for (int64_t cool : {0, 2}) shapes.push_back({kind, p, m, iterations, k, cool});
                } else {
                    shapes.push_back(plain);
                }
                for (const ScheduleSpec& s : shapes) {
                    if (kind == ScheduleKind::two_bw && m < p) continue;
                    if (s.sync_start + s.sync_cooldown > s.optimizer_steps()) continue;
                    specs.push_back(s);
                }
            }
    return specs;
}

// The steps of iterations [first, end) of `spec`.
int64_t step_of_iteration(const ScheduleSpec& spec, int64_t iteration) {
    return iteration * (spec.optimizer_steps() / spec.steps);
}

void check_window(const ScheduleSpec& spec, const std::vector<StagePlan>& whole, int64_t first_iteration,
                  int64_t end_iteration) {
    const int64_t first = step_of_iteration(spec, first_iteration), end = step_of_iteration(spec, end_iteration);
    const StagePlacement placement = spec.placement();
    const std::vector<StagePlan> parts = virtual_stage_plans(whole, placement);
    for (int r = 0; r < spec.stages; ++r) {
        CAPTURE(r);
        ScheduleActions rank(spec, r, first, end);
        REQUIRE(drain(rank) == steps_between(whole[static_cast<size_t>(r)], first, end));
        for (int c = 0; c < spec.chunks_per_rank(); ++c) {
            CAPTURE(c);
            const int part = placement.part(r, c);
            ScheduleActions chunk(spec, r, first, end, c);
            REQUIRE(drain(chunk) == steps_between(parts[static_cast<size_t>(part)], first, end));
        }
    }
}

std::string describe_spec(const ScheduleSpec& s) {
    return std::string(schedule_kind_name(s.kind)) + " p " + std::to_string(s.stages) + " m " +
           std::to_string(s.microbatches) + " T " + std::to_string(s.steps) + " v " + std::to_string(s.virtual_stages) +
           " K " + std::to_string(s.sync_start) + " Kc " + std::to_string(s.sync_cooldown);
}

}  // namespace

TEST_CASE("action stream: the lazy lists are the whole expansion's, from any first step to any end") {
    for (int64_t iterations : {int64_t{1}, int64_t{12}, int64_t{40}})
        for (const ScheduleSpec& spec : specs_of(iterations)) {
            CAPTURE(describe_spec(spec));
            spec.validate();
            const std::vector<StagePlan> whole = build_schedule(spec);
            check_window(spec, whole, 0, iterations);  // the whole run
            check_window(spec, whole, 0, std::min<int64_t>(iterations, 12));  // the first 12 iterations
            if (iterations > 12) {
                check_window(spec, whole, iterations - 9, iterations - 2);  // a window late in the run
                check_window(spec, whole, iterations / 2, iterations);       // resumed half-way
                check_window(spec, whole, 1, 2);                             // one iteration
            }
        }
}

TEST_CASE("action stream: an early stop ends the list at once, mid-way included") {
    const ScheduleSpec spec{ScheduleKind::two_bw, 3, 4, 20, 2, 2};
    const StagePlan whole = build_schedule(spec)[1];
    ScheduleActions actions(spec, 1, 0, spec.optimizer_steps());
    StagePlan got;
    for (int i = 0; i < 30; ++i) got.push_back(*actions.next());
    actions.end_before_step(6);  // stops with the actions of steps < 6, whatever was made ahead
    while (std::optional<Action> a = actions.next()) got.push_back(*a);
    StagePlan want(whole.begin(), whole.begin() + 30);
    for (size_t i = 30; i < whole.size(); ++i)
        if (whole[i].step < 6) want.push_back(whole[i]);
    CHECK(got == want);
}

TEST_CASE("version uses: the schedule's rules count what the whole list uses, from any first step") {
    for (const ScheduleSpec& spec : specs_of(12)) {
        CAPTURE(describe_spec(spec));
        const std::vector<StagePlan> parts = virtual_stage_plans(build_schedule(spec), spec.placement());
        for (int part = 0; part < spec.virtual_stage_count(); ++part)
            for (int64_t first_iteration : {0, 5})
                for (bool stale : {false, true}) {
                    CAPTURE(part);
                    CAPTURE(first_iteration);
                    CAPTURE(stale);
                    const int64_t first = step_of_iteration(spec, first_iteration);
                    const StagePlan plan = steps_between(parts[static_cast<size_t>(part)], first, INT64_MAX);
                    // The count over the list, as the executor counted it before it made its lists lazily.
                    std::map<int64_t, int64_t> uses;
                    std::map<int64_t, int64_t> stale_of_step;
                    std::map<int64_t, bool> synchronous;
                    int64_t last_backward_version = 0;
                    for (const Action& a : plan) {
                        if (uses_weights(a.type)) {
                            ++uses[a.version];
                            if (a.version == a.step) synchronous[a.version] = true;
                        }
                        if (ends_microbatch(a.type)) last_backward_version = a.version;
                        if (a.type == ActionType::optimizer_step && stale && last_backward_version < a.step) {
                            ++uses[last_backward_version];
                            stale_of_step[a.step] = last_backward_version;
                        }
                    }
                    const VersionUses got(spec, spec.placement().rank_of(part), first, stale);
                    for (int64_t v = 0; v <= spec.optimizer_steps() + 1; ++v) {
                        CAPTURE(v);
                        REQUIRE(got.uses(v) == (uses.contains(v) ? uses[v] : 0));
                        if (uses.contains(v)) REQUIRE(got.has_synchronous_use(v) == synchronous.contains(v));
                        REQUIRE(got.stale_version_of_step(v) ==
                                (stale_of_step.contains(v) ? std::optional<int64_t>(stale_of_step[v]) : std::nullopt));
                    }
                    if (!uses.empty()) CHECK(got.oldest_used() == uses.begin()->first);
                }
    }
}

TEST_CASE("part peaks: a short run of the same shape holds what the whole run holds") {
    for (int64_t iterations : {int64_t{1}, int64_t{3}, int64_t{40}})
        for (const ScheduleSpec& spec : specs_of(iterations)) {
            CAPTURE(describe_spec(spec));
            const ScheduleSpec shortened = representative_run(spec);
            CHECK_NOTHROW(shortened.validate());
            CHECK(shortened.steps <= spec.steps);
            const std::vector<StagePlan> parts = virtual_stage_plans(build_schedule(spec), spec.placement());
            const std::vector<PartPeaks> got = part_peaks(spec);
            const std::vector<StagePlan> short_parts = representative_part_plans(spec);
            REQUIRE(got.size() == parts.size());
            REQUIRE(short_parts.size() == parts.size());
            // A stash whose four figures differ (a rerun on top of what it keeps, more between B and W than before B,
            // as under full recomputation and zb-h1): the walk's peak is the whole run's too.
            const MicrobatchStashBytes one{.kept = 3, .backward_peak = 11, .input_half_peak = 17, .weight_half = 13};
            for (int s = 0; s < static_cast<int>(parts.size()); ++s) {
                CAPTURE(s);
                const auto part = static_cast<size_t>(s);
                CHECK(got[part] == PartPeaks{max_versions_held(parts, s), max_in_flight(parts, s)});
                CHECK(peak_stash_bytes(short_parts[part], one) == peak_stash_bytes(parts[part], one));
            }
        }
    // A long run costs a short run's work: 10^12 iterations of 2bw with sync start and cool-down.
    const ScheduleSpec huge{ScheduleKind::two_bw, 4, 8, 1'000'000'000'000, 1000, 1000};
    CHECK(representative_run(huge).steps == 8);
    CHECK(part_peaks(huge).size() == 4);
}

TEST_CASE("action stream: a resumed run late in a run of 10^12 iterations starts at once") {
    const ScheduleSpec spec{ScheduleKind::pipedream, 4, 8, 1'000'000'000'000, 5, 5};
    const int64_t first = spec.optimizer_steps() - 24;  // three iterations before the end
    ScheduleActions actions(spec, 1, first, spec.optimizer_steps());
    const StagePlan got = drain(actions);
    // The same three iterations at the end of a run of 6 have the same shape, renumbered.
    const ScheduleSpec small{ScheduleKind::pipedream, 4, 8, 6, 5, 5};
    const int64_t shift = spec.optimizer_steps() - small.optimizer_steps();
    StagePlan want = steps_between(build_schedule(small)[1], small.optimizer_steps() - 24, INT64_MAX);
    for (Action& a : want) {
        a.step += shift;
        if (a.microbatch >= 0) a.microbatch += shift;
        a.version += shift;
    }
    CHECK(got == want);
}

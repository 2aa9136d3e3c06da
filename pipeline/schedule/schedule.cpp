// Schedule builders. Each stage's plan is made in two passes: first the order of its compute (forwards and
// backwards of microbatches, per the schedule's rule), then the expansion of that order into actions
// (receives before, sends after, optimizer steps after the last backward of each step, versions).
#include "pipeline/schedule/schedule.h"

#include <algorithm>
#include <array>
#include <map>
#include <set>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "pipeline/schedule/action_expander.h"
#include "src/core/error.h"

namespace nb {

namespace {

void check_stage(const std::vector<StagePlan>& plans, int stage) {
    if (stage < 0 || stage >= static_cast<int>(plans.size()))
        throw std::out_of_range(fmt::format("stage {} of a {}-stage schedule", stage, plans.size()));
}

}  // namespace

std::string_view action_type_name(ActionType type) {
    switch (type) {
        case ActionType::forward: return "forward";
        case ActionType::backward: return "backward";
        case ActionType::backward_input: return "backward_input";
        case ActionType::backward_weight: return "backward_weight";
        case ActionType::send_activation: return "send_activation";
        case ActionType::recv_activation: return "recv_activation";
        case ActionType::send_gradient: return "send_gradient";
        case ActionType::recv_gradient: return "recv_gradient";
        case ActionType::optimizer_step: return "optimizer_step";
    }
    return "?";
}

bool is_compute(ActionType type) { return uses_weights(type) || type == ActionType::optimizer_step; }

bool uses_weights(ActionType type) {
    return type == ActionType::forward || type == ActionType::backward || type == ActionType::backward_input ||
           type == ActionType::backward_weight;
}

bool ends_microbatch(ActionType type) { return type == ActionType::backward || type == ActionType::backward_weight; }

std::string describe(const Action& a) {
    switch (a.type) {
        case ActionType::forward: return fmt::format("F{} (step {}, W{})", a.microbatch, a.step, a.version);
        case ActionType::backward: return fmt::format("B{} (step {}, W{})", a.microbatch, a.step, a.version);
        case ActionType::backward_input:
            return fmt::format("B{} input (step {}, W{})", a.microbatch, a.step, a.version);
        case ActionType::backward_weight:
            return fmt::format("W{} weight (step {}, W{})", a.microbatch, a.step, a.version);
        case ActionType::send_activation:
        case ActionType::send_gradient:
            return fmt::format("{} mb {} to stage {}", action_type_name(a.type), a.microbatch, a.peer);
        case ActionType::recv_activation:
        case ActionType::recv_gradient:
            return fmt::format("{} mb {} from stage {}", action_type_name(a.type), a.microbatch, a.peer);
        case ActionType::optimizer_step: return fmt::format("optimizer_step {} -> W{}", a.step, a.version);
    }
    return "?";
}

int64_t weight_version(const ScheduleSpec& spec, int stage, int64_t microbatch) {
    const int64_t t = spec.step_of(microbatch);
    if (spec.is_synchronous_step(t)) return t;
    if (spec.kind == ScheduleKind::two_bw) return std::max<int64_t>(t - 1, 0);
    // pipedream: the first asynchronous microbatch is sync_start (one step per microbatch).
    return std::max<int64_t>(spec.sync_start, microbatch - asynchronous_delay(spec, stage));
}

int64_t asynchronous_delay(const ScheduleSpec& spec, int stage) {
    switch (spec.kind) {
        case ScheduleKind::two_bw: return 1;
        case ScheduleKind::pipedream: return spec.stages - 1 - stage;
        default: return 0;
    }
}

std::vector<StagePlan> build_schedule(const ScheduleSpec& spec) {
    spec.validate();
    std::vector<StagePlan> plans(static_cast<size_t>(spec.stages));
    for (int s = 0; s < spec.stages; ++s) {
        ActionExpander expander(spec, s);
        for (const Compute& c : compute_order(spec, s)) expander.add(c, plans[s]);
        expander.finish(plans[s]);
    }
    return plans;
}

namespace {

// max_versions_held over the actions of one chunk of a rank (each chunk has weights of its own).
int64_t versions_held_by_chunk(const StagePlan& plan, int chunk) {
    // Uses still to come of each version, by forwards and backwards.
    std::map<int64_t, int64_t> uses_left;
    for (const Action& a : plan)
        if (a.chunk == chunk && uses_weights(a.type)) ++uses_left[a.version];
    // Held: the newest version, and every existing version with uses to come. Version 0 exists from the start.
    int64_t newest = 0;
    std::set<int64_t> held = {0};
    int64_t most = 1;
    for (const Action& a : plan) {
        if (a.chunk != chunk) continue;
        if (uses_weights(a.type)) {
            held.insert(a.version);  // a plan that uses a version before making it still counts it
            most = std::max<int64_t>(most, static_cast<int64_t>(held.size()));
            if (--uses_left[a.version] == 0 && a.version != newest) held.erase(a.version);
        } else if (a.type == ActionType::optimizer_step) {
            // The update is in place: the old newest version survives only if uses of it are still to come.
            if (uses_left[newest] == 0) held.erase(newest);
            newest = a.version;
            held.insert(newest);
            most = std::max<int64_t>(most, static_cast<int64_t>(held.size()));
        }
    }
    return most;
}

}  // namespace

int64_t max_versions_held(const std::vector<StagePlan>& plans, int stage) {
    check_stage(plans, stage);
    int chunks = 1;
    for (const Action& a : plans[stage]) chunks = std::max(chunks, a.chunk + 1);
    int64_t most = 1;
    for (int c = 0; c < chunks; ++c) most = std::max(most, versions_held_by_chunk(plans[stage], c));
    return most;
}

std::vector<StagePlan> virtual_stage_plans(const std::vector<StagePlan>& rank_plans, const StagePlacement& placement) {
    if (static_cast<int>(rank_plans.size()) != placement.ranks)
        throw std::invalid_argument(
            fmt::format("virtual_stage_plans: {} rank plans for {} ranks", rank_plans.size(), placement.ranks));
    std::vector<StagePlan> plans(static_cast<size_t>(placement.parts()));
    for (int r = 0; r < placement.ranks; ++r)
        for (const Action& a : rank_plans[r]) plans[static_cast<size_t>(placement.part(r, a.chunk))].push_back(a);
    return plans;
}

int64_t max_in_flight(const std::vector<StagePlan>& plans, int stage) {
    check_stage(plans, stage);
    int64_t in_flight = 0, most = 0;
    for (const Action& a : plans[stage]) {
        if (a.type == ActionType::forward) most = std::max(most, ++in_flight);
        if (ends_microbatch(a.type)) --in_flight;
    }
    return most;
}

namespace {

// A phase of `steps` steps cut to `most`, keeping its count modulo `granule` (pipedream's steps per iteration).
int64_t cut_phase(int64_t steps, int64_t most, int64_t granule) {
    return steps <= most ? steps : most + (steps - most) % granule;
}

}  // namespace

ScheduleSpec representative_run(const ScheduleSpec& spec) {
    ScheduleSpec run = spec;
    if (!is_asynchronous(spec.kind)) {
        run.steps = std::min<int64_t>(spec.steps, 2);
        return run;
    }
    const int64_t granule = spec.optimizer_steps() / spec.steps;  // steps per iteration
    const int64_t async_most = spec.kind == ScheduleKind::pipedream ? 4 * int64_t{spec.stages} + 4 : 4;
    const int64_t async_steps = spec.optimizer_steps() - spec.sync_start - spec.sync_cooldown;
    run.sync_start = cut_phase(spec.sync_start, 2, granule);
    run.sync_cooldown = cut_phase(spec.sync_cooldown, 2, granule);
    run.steps = (run.sync_start + cut_phase(async_steps, async_most, granule) + run.sync_cooldown) / granule;
    return run;
}

std::vector<StagePlan> representative_part_plans(const ScheduleSpec& spec) {
    const ScheduleSpec run = representative_run(spec);
    return virtual_stage_plans(build_schedule(run), run.placement());
}

int64_t peak_stash_bytes(const StagePlan& plan, const MicrobatchStashBytes& one) {
    int64_t live = 0, peak = 0;
    for (const Action& a : plan) {
        switch (a.type) {
        case ActionType::forward:
            live += one.kept;
            peak = std::max(peak, live);
            break;
        case ActionType::backward:
            peak = std::max(peak, live - one.kept + one.backward_peak);
            live -= one.kept;
            break;
        case ActionType::backward_input:
            peak = std::max(peak, live - one.kept + one.input_half_peak);
            live += one.weight_half - one.kept;
            break;
        case ActionType::backward_weight:
            live -= one.weight_half;
            break;
        default:
            break;
        }
    }
    return peak;
}

std::vector<PartPeaks> part_peaks(const ScheduleSpec& spec) {
    const std::vector<StagePlan> plans = representative_part_plans(spec);
    std::vector<PartPeaks> peaks;
    for (int s = 0; s < static_cast<int>(plans.size()); ++s)
        peaks.push_back({max_versions_held(plans, s), max_in_flight(plans, s)});
    return peaks;
}

}  // namespace nb

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

#include "src/core/error.h"

namespace nb {

namespace {

// A run of consecutive optimizer steps [first_step, end_step). A synchronous phase flushes the pipeline after
// every step; an asynchronous phase streams all its microbatches through one 1F1B pipeline and drains only at
// its end.
struct Phase {
    int64_t first_step;
    int64_t end_step;
    bool synchronous;
};

// gpipe, 1f1b: one synchronous phase. 2bw, pipedream: [0, K) sync, [K, N - K_c) async, [N - K_c, N) sync,
// leaving out the empty ones.
std::vector<Phase> phases_of(const ScheduleSpec& spec) {
    const int64_t n = spec.optimizer_steps();
    if (!is_asynchronous(spec.kind)) return {{0, n, true}};
    const int64_t async_begin = spec.sync_start, async_end = n - spec.sync_cooldown;
    std::vector<Phase> phases;
    if (async_begin > 0) phases.push_back({0, async_begin, true});
    if (async_end > async_begin) phases.push_back({async_begin, async_end, false});
    if (async_end < n) phases.push_back({async_end, n, true});
    return phases;
}

// One unit of compute on a stage: a forward, backward, B or W of one microbatch.
struct Compute {
    ActionType type;
    int64_t microbatch;
    int chunk = 0;
};
constexpr ActionType kF = ActionType::forward, kB = ActionType::backward;
constexpr ActionType kBInput = ActionType::backward_input, kWWeight = ActionType::backward_weight;

// GPipe: the forwards of microbatches [first, first+count), then their backwards, both in microbatch order.
void append_gpipe_order(int64_t first, int64_t count, std::vector<Compute>& order) {
    for (int64_t i = 0; i < count; ++i) order.push_back({kF, first + i});
    for (int64_t i = 0; i < count; ++i) order.push_back({kB, first + i});
}

// 1F1B on stage s of p over microbatches [first, first+count): w = min(p-s-1, count) warm-up forwards, then
// forward w+k and backward k alternately for k = 0, 1, ... until the forwards run out, then the remaining
// backwards (cool-down). Forward j on stage s thus comes after backward j-(p-s): at most p-s in flight.
void append_one_f_one_b_order(int64_t first, int64_t count, int p, int s, std::vector<Compute>& order) {
    const int64_t warmup = std::min<int64_t>(p - s - 1, count);
    for (int64_t i = 0; i < warmup; ++i) order.push_back({kF, first + i});
    for (int64_t k = 0; warmup + k < count; ++k) {
        order.push_back({kF, first + warmup + k});
        order.push_back({kB, first + k});
    }
    for (int64_t k = count - warmup; k < count; ++k) order.push_back({kB, first + k});
}

// ZB-H1 on stage s of p over microbatches [first, first+count): 1F1B's order with each backward k split into B k
// and W k, and W k placed s computes later: right after B k+s (while forwards remain, a stage waiting for its
// next gradient would idle there otherwise), and the s that are left after the last B at the end, where 1F1B's
// cool-down bubble was. Forward j still comes after B j-(p-s), so the forwards keep 1F1B's pace.
void append_zb_h1_order(int64_t first, int64_t count, int p, int s, std::vector<Compute>& order) {
    const int64_t warmup = std::min<int64_t>(p - s - 1, count), lag = s;
    int64_t next_w = 0;
    auto after_b = [&](int64_t k) {  // B k has run: the W that is due now
        if (k - next_w >= lag) order.push_back({kWWeight, first + next_w++});
    };
    for (int64_t i = 0; i < warmup; ++i) order.push_back({kF, first + i});
    for (int64_t k = 0; warmup + k < count; ++k) {
        order.push_back({kF, first + warmup + k});
        order.push_back({kBInput, first + k});
        after_b(k);
    }
    for (int64_t k = count - warmup; k < count; ++k) {
        order.push_back({kBInput, first + k});
        after_b(k);
    }
    while (next_w < count) order.push_back({kWWeight, first + next_w++});
}

// Interleaved 1F1B on rank r of p with v chunks over the m microbatches [first, first+m) of one step (m a
// multiple of p; the order in schedule.h, as Megatron-LM's forward_backward_pipelining_with_interleaving).
void append_interleaved_order(int64_t first, int64_t m, int p, int v, int r, std::vector<Compute>& order) {
    const int64_t total = m * v;
    auto microbatch_of = [&](int64_t k) { return first + (k / (int64_t{p} * v)) * p + k % p; };
    auto forward = [&](int64_t k) { return Compute{kF, microbatch_of(k), static_cast<int>((k / p) % v)}; };
    auto backward = [&](int64_t k) { return Compute{kB, microbatch_of(k), static_cast<int>(v - 1 - (k / p) % v)}; };
    const int64_t warmup = m == p ? total : std::min<int64_t>(total, 2 * (p - r - 1) + int64_t{v - 1} * p);
    for (int64_t k = 0; k < warmup; ++k) order.push_back(forward(k));
    for (int64_t k = 0; warmup + k < total; ++k) {
        order.push_back(forward(warmup + k));
        order.push_back(backward(k));
    }
    for (int64_t k = total - warmup; k < total; ++k) order.push_back(backward(k));
}

// ZB-V on rank r of p over the microbatches [first, first+m) of one step: chunk 0 runs part r, chunk 1 part
// 2p-1-r (the V of src/plan/stage_placement.h). The rule is written for n = max(m, 2p-1) microbatches, where each
// phase is whole; the computes of microbatches >= m are then left out. They exist on no rank, and leaving the same
// computes out of every rank's order keeps it free of deadlock: each wait that remains is one the whole order had.
//   warm-up    2(p-r)-1 forwards on chunk 0; r times F1 F0; p-r times F1 B1 W1
//   steady     while chunk 0 has forwards left or chunk 1's lag behind it: [F0 while any left] B0 W0 F1 B1 W1
//   cool-down  r times B0 B1 (their W wait); p-r times B0 and the oldest waiting W0; then the waiting W1, then W0
// Every chunk runs its forwards, its B and its W each in microbatch order.
void append_zb_v_order(int64_t first, int64_t m, int p, int r, std::vector<Compute>& order) {
    const int64_t n = std::max<int64_t>(m, 2 * int64_t{p} - 1);
    std::array<int64_t, 2> forwards{}, inputs{}, weights{};  // per chunk: how many of each have been placed
    auto place = [&](ActionType type, int chunk) {
        std::array<int64_t, 2>& count = type == kF ? forwards : type == kBInput ? inputs : weights;
        const int64_t k = count[static_cast<size_t>(chunk)]++;
        if (k < m) order.push_back({type, first + k, chunk});
    };
    auto backward = [&](int chunk) {
        place(kBInput, chunk);
        place(kWWeight, chunk);
    };
    for (int i = 0; i < 2 * (p - r) - 1; ++i) place(kF, 0);
    for (int i = 0; i < r; ++i) {
        place(kF, 1);
        place(kF, 0);
    }
    for (int i = 0; i < p - r; ++i) {
        place(kF, 1);
        backward(1);
    }
    while (forwards[1] < forwards[0] || forwards[0] < n) {
        if (forwards[0] < n) place(kF, 0);
        backward(0);
        place(kF, 1);
        backward(1);
    }
    for (int i = 0; i < r; ++i) {
        place(kBInput, 0);
        place(kBInput, 1);
    }
    for (int i = 0; i < p - r; ++i) {
        place(kBInput, 0);
        place(kWWeight, 0);
    }
    while (weights[1] < n) place(kWWeight, 1);
    while (weights[0] < n) place(kWWeight, 0);
}

// The compute order of stage s over the whole run, phase by phase.
std::vector<Compute> compute_order(const ScheduleSpec& spec, int s) {
    const int64_t per_step = spec.microbatches_per_step();
    std::vector<Compute> order;
    order.reserve(static_cast<size_t>(2 * spec.total_microbatches()));
    for (const Phase& phase : phases_of(spec)) {
        if (phase.synchronous) {
            for (int64_t t = phase.first_step; t < phase.end_step; ++t) {
                if (spec.kind == ScheduleKind::zb_v)
                    append_zb_v_order(t * per_step, per_step, spec.stages, s, order);
                else if (spec.virtual_stages > 1)
                    append_interleaved_order(t * per_step, per_step, spec.stages, spec.virtual_stages, s, order);
                else if (spec.kind == ScheduleKind::gpipe)
                    append_gpipe_order(t * per_step, per_step, order);
                else if (spec.kind == ScheduleKind::zb_h1)
                    append_zb_h1_order(t * per_step, per_step, spec.stages, s, order);
                else
                    append_one_f_one_b_order(t * per_step, per_step, spec.stages, s, order);
            }
        } else {
            const int64_t count = (phase.end_step - phase.first_step) * per_step;
            append_one_f_one_b_order(phase.first_step * per_step, count, spec.stages, s, order);
        }
    }
    return order;
}

// Expands stage s's compute order into actions: receive, compute, send; and the optimizer step after the backward
// (or W) of the last microbatch of each step: right after it, or with chunks once the rank has no compute of that
// step left (so that a rank's list never has a chunk's step before the other chunks' work of the same step: a step
// that waits for every part's, as under the global clip, could then never be reached by them).
// With chunks, each compute runs on its chunk's virtual stage vs (spec.placement()) and talks to vs - 1 and vs + 1.
StagePlan expand_to_actions(const ScheduleSpec& spec, int s, const std::vector<Compute>& order) {
    const StagePlacement placement = spec.placement();
    const int parts = placement.parts();
    StagePlan plan;
    plan.reserve(order.size() * 3 + static_cast<size_t>(spec.optimizer_steps() * placement.chunks));
    std::vector<Action> due_steps;  // optimizer steps whose chunk is done with the step, in the order they came due
    auto place_due_steps = [&] {
        plan.insert(plan.end(), due_steps.begin(), due_steps.end());
        due_steps.clear();
    };
    for (const Compute& c : order) {
        if (!due_steps.empty() && spec.step_of(c.microbatch) != due_steps.front().step) place_due_steps();
        const int vs = placement.part(s, c.chunk);
        const bool first_stage = vs == 0, last_stage = vs == parts - 1;
        const int64_t mb = c.microbatch, step = spec.step_of(mb), version = weight_version(spec, s, mb);
        auto add = [&](ActionType type, int peer) { plan.push_back({type, mb, step, version, peer, c.chunk}); };
        if (c.type == kF) {
            if (!first_stage) add(ActionType::recv_activation, vs - 1);
            add(kF, -1);
            if (!last_stage) add(ActionType::send_activation, vs + 1);
            continue;
        }
        const bool input_gradient = c.type == kB || c.type == kBInput;  // W neither receives nor sends
        if (input_gradient && !last_stage) add(ActionType::recv_gradient, vs + 1);
        add(c.type, -1);
        if (input_gradient && !first_stage) add(ActionType::send_gradient, vs - 1);
        const bool last_of_step = (mb + 1) % spec.microbatches_per_step() == 0;
        if (ends_microbatch(c.type) && last_of_step)
            due_steps.push_back({ActionType::optimizer_step, -1, step, step + 1, -1, c.chunk});
    }
    place_due_steps();
    return plan;
}

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
    for (int s = 0; s < spec.stages; ++s) plans[s] = expand_to_actions(spec, s, compute_order(spec, s));
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

}  // namespace nb

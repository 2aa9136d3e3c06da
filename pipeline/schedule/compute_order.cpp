#include "pipeline/schedule/compute_order.h"

#include <algorithm>
#include <array>

namespace nb {

namespace {

constexpr ActionType kF = ActionType::forward, kB = ActionType::backward;
constexpr ActionType kBInput = ActionType::backward_input, kWWeight = ActionType::backward_weight;

// GPipe: the forwards of microbatches [first, first+count), then their backwards, both in microbatch order.
void append_gpipe_order(int64_t first, int64_t count, std::vector<Compute>& order) {
    for (int64_t i = 0; i < count; ++i) order.push_back({kF, first + i});
    for (int64_t i = 0; i < count; ++i) order.push_back({kB, first + i});
}

// 1F1B on stage s of p over microbatches [first, first+count), as a loop (OneFOneBStream gives each position on its
// own; the whole run's list keeps the loop, so the two are checked against each other).
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

}  // namespace

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

void append_step_order(const ScheduleSpec& spec, int s, int64_t step, std::vector<Compute>& order) {
    const int64_t per_step = spec.microbatches_per_step(), first = step * per_step;
    if (spec.kind == ScheduleKind::zb_v)
        append_zb_v_order(first, per_step, spec.stages, s, order);
    else if (spec.virtual_stages > 1)
        append_interleaved_order(first, per_step, spec.stages, spec.virtual_stages, s, order);
    else if (spec.kind == ScheduleKind::gpipe)
        append_gpipe_order(first, per_step, order);
    else if (spec.kind == ScheduleKind::zb_h1)
        append_zb_h1_order(first, per_step, spec.stages, s, order);
    else
        append_one_f_one_b_order(first, per_step, spec.stages, s, order);
}

OneFOneBStream::OneFOneBStream(int64_t first_microbatch, int64_t microbatches, int p, int s)
    : first(first_microbatch), count(microbatches), warmup(std::min<int64_t>(p - s - 1, microbatches)) {}

// The order is: warmup forwards; count - warmup pairs (forward warmup + k, backward k); warmup backwards.
Compute OneFOneBStream::at(int64_t position) const {
    if (position < warmup) return {kF, first + position};
    const int64_t paired = position - warmup, pairs = count - warmup;
    if (paired < 2 * pairs)
        return paired % 2 == 0 ? Compute{kF, first + warmup + paired / 2} : Compute{kB, first + paired / 2};
    return {kB, first + pairs + (paired - 2 * pairs)};
}

int64_t OneFOneBStream::forward_position(int64_t k) const { return k < warmup ? k : warmup + 2 * (k - warmup); }

int64_t OneFOneBStream::backward_position(int64_t k) const {
    const int64_t pairs = count - warmup;
    return k < pairs ? warmup + 2 * k + 1 : warmup + 2 * pairs + (k - pairs);
}

// The compute order of stage s over the whole run, phase by phase.
std::vector<Compute> compute_order(const ScheduleSpec& spec, int s) {
    const int64_t per_step = spec.microbatches_per_step();
    std::vector<Compute> order;
    for (const Phase& phase : phases_of(spec)) {
        if (phase.synchronous) {
            for (int64_t t = phase.first_step; t < phase.end_step; ++t) append_step_order(spec, s, t, order);
        } else {
            const int64_t count = (phase.end_step - phase.first_step) * per_step;
            append_one_f_one_b_order(phase.first_step * per_step, count, spec.stages, s, order);
        }
    }
    return order;
}


}  // namespace nb

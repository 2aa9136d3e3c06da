// The order of a stage's compute under each schedule (the rules in pipeline/schedule/schedule.h): which forward,
// backward, B or W of which microbatch comes next. Both the whole run's lists (build_schedule) and the executor's
// lazily generated ones (pipeline/schedule/action_stream.h) are made from these rules, so they cannot drift apart.
//
// A run is a sequence of phases. A synchronous phase flushes the pipeline after every optimizer step, so each step's
// order is the first step's with its microbatches renumbered (step_order). An asynchronous phase (2bw, pipedream) is
// one 1F1B stream over all its microbatches; its order is a closed form of the position (OneFOneBStream), so any
// part of it is made without the parts before it.
#pragma once

#include <cstdint>
#include <vector>

#include "pipeline/schedule/schedule.h"

namespace nb {

// A run of consecutive optimizer steps [first_step, end_step). A synchronous phase flushes the pipeline after
// every step; an asynchronous phase streams all its microbatches through one 1F1B pipeline and drains only at
// its end.
struct Phase {
    int64_t first_step;
    int64_t end_step;
    bool synchronous;
};

// gpipe, 1f1b, zb-h1, zb-v: one synchronous phase. 2bw, pipedream: [0, K) sync, [K, N - K_c) async,
// [N - K_c, N) sync, leaving out the empty ones.
std::vector<Phase> phases_of(const ScheduleSpec& spec);

// One unit of compute on a stage: a forward, backward, B or W of one microbatch, on one of the rank's chunks.
struct Compute {
    ActionType type;
    int64_t microbatch;
    int chunk = 0;
    bool operator==(const Compute&) const = default;
};

// Rank s's compute order for synchronous step `step` (the step's microbatches only), appended to `order`.
void append_step_order(const ScheduleSpec& spec, int s, int64_t step, std::vector<Compute>& order);

// 1F1B on stage s of p over the `count` microbatches from `first`: w = min(p-s-1, count) warm-up forwards, then
// forward w+k and backward k alternately for k = 0, 1, ... until the forwards run out, then the remaining
// backwards (cool-down). Forward j on stage s thus comes after backward j-(p-s): at most p-s in flight.
// Positions 0 .. size()-1 of the order, each computed on its own.
struct OneFOneBStream {
    int64_t first;
    int64_t count;
    int64_t warmup;

    OneFOneBStream(int64_t first, int64_t count, int p, int s);
    int64_t size() const { return 2 * count; }
    Compute at(int64_t position) const;
    // The position of the forward / backward of microbatch first + k.
    int64_t forward_position(int64_t k) const;
    int64_t backward_position(int64_t k) const;
};

// The compute order of stage s over the whole run, phase by phase.
std::vector<Compute> compute_order(const ScheduleSpec& spec, int s);

}  // namespace nb

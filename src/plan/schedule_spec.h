// What a pipeline run's schedule is, as the plan states it: its kind and its size (stages, microbatches,
// iterations, synchronous steps), with the rules that tie them together and the step arithmetic that follows
// (pipeline/schedule/schedule.h turns it into each stage's action list; its header has the exact semantics).
#pragma once

#include <cstdint>
#include <string_view>

#include "src/core/name_table.h"
#include "src/plan/stage_placement.h"

namespace nb {

enum class ScheduleKind { gpipe, one_f_one_b, two_bw, pipedream, zb_h1, zb_v };
inline constexpr auto kScheduleKinds = name_table<ScheduleKind>("--schedule", {
    {"gpipe", ScheduleKind::gpipe},
    {"1f1b", ScheduleKind::one_f_one_b},
    {"2bw", ScheduleKind::two_bw},
    {"pipedream", ScheduleKind::pipedream},
    {"zb-h1", ScheduleKind::zb_h1},
    {"zb-v", ScheduleKind::zb_v},
});

// kScheduleKinds.parse and .name.
ScheduleKind parse_schedule_kind(std::string_view name);
std::string_view schedule_kind_name(ScheduleKind kind);
// 2bw and pipedream: steps outside --sync-start / --sync-cooldown run without flushes on stale weights.
bool is_asynchronous(ScheduleKind kind);
// zb-h1, zb-v: each backward runs as B (input gradient) and W (weight gradient), apart.
bool splits_backward(ScheduleKind kind);

struct ScheduleSpec {
    ScheduleKind kind = ScheduleKind::one_f_one_b;
    int stages = 1;             // p
    int64_t microbatches = 1;   // m, per iteration
    int64_t steps = 1;          // T iterations
    int64_t sync_start = 0;     // the first K optimizer steps run as 1f1b (2bw, pipedream)
    int64_t sync_cooldown = 0;  // the last K optimizer steps run as 1f1b (2bw, pipedream)
    // --virtual-stages v, model chunks per rank (Megatron's virtual pipeline stages): 1f1b with v > 1 is
    // interleaved 1F1B. zb-v always runs 2 (1, the default, or 2 may be given). Read chunks_per_rank(), not this.
    int virtual_stages = 1;

    // nb::UsageError naming the flag: p, m, v >= 1 (check_run_shape: src/plan/run_shape.h), T >= 1; 2bw needs
    // m >= p; 0 <= sync_start, sync_cooldown and sync_start + sync_cooldown <= optimizer_steps(); v > 1 only for
    // 1f1b with m a multiple of p, or v = 2 for zb-v.
    void validate() const;

    int chunks_per_rank() const { return kind == ScheduleKind::zb_v ? 2 : virtual_stages; }
    int virtual_stage_count() const { return stages * chunks_per_rank(); }  // the parts the model is cut into
    // Which part each chunk of each rank runs: the loop of interleaved 1F1B, or zb-v's V.
    StagePlacement placement() const;

    int64_t total_microbatches() const { return steps * microbatches; }
    int64_t microbatches_per_step() const { return kind == ScheduleKind::pipedream ? 1 : microbatches; }
    int64_t optimizer_steps() const { return total_microbatches() / microbatches_per_step(); }
    int64_t step_of(int64_t microbatch) const { return microbatch / microbatches_per_step(); }
    // True for the steps that run as 1f1b with a flush: every step of gpipe/1f1b, and the --sync-start /
    // --sync-cooldown steps of 2bw/pipedream.
    bool is_synchronous_step(int64_t step) const;
};

}  // namespace nb

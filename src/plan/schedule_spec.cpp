#include "src/plan/schedule_spec.h"

#include <fmt/format.h>

#include "src/core/error.h"
#include "src/plan/run_shape.h"

namespace nb {

ScheduleKind parse_schedule_kind(std::string_view name) { return kScheduleKinds.parse(name); }

std::string_view schedule_kind_name(ScheduleKind kind) { return kScheduleKinds.name(kind); }

bool is_asynchronous(ScheduleKind kind) { return kind == ScheduleKind::two_bw || kind == ScheduleKind::pipedream; }

bool splits_backward(ScheduleKind kind) { return kind == ScheduleKind::zb_h1 || kind == ScheduleKind::zb_v; }

void ScheduleSpec::validate() const {
    check_run_shape({.num_microbatches = microbatches, .stages = stages, .virtual_stages = virtual_stages});
    if (steps < 1) throw UsageError(fmt::format("--train-iters must be positive, got {}", steps));
    if (kind == ScheduleKind::two_bw && microbatches < stages)
        throw UsageError(fmt::format(
            "--schedule 2bw needs --num-microbatches >= the number of stages (P): got --num-microbatches {} "
            "with {} stages",
            microbatches, stages));
    if (kind == ScheduleKind::zb_v && virtual_stages > 2)
        throw UsageError(fmt::format("--schedule zb-v runs two chunks per stage in a V: --virtual-stages must be 2 "
                                     "(or left out), got {}",
                                     virtual_stages));
    if (virtual_stages > 1 && kind != ScheduleKind::one_f_one_b && kind != ScheduleKind::zb_v)
        throw UsageError(fmt::format("--virtual-stages {} (interleaved 1F1B) needs --schedule 1f1b, not {}",
                                     virtual_stages, schedule_kind_name(kind)));
    if (virtual_stages > 1 && kind == ScheduleKind::one_f_one_b && microbatches % stages != 0)
        throw UsageError(fmt::format(
            "--virtual-stages {} (interleaved 1F1B) needs --num-microbatches a multiple of the {} stages, as "
            "Megatron-LM does: got {}",
            virtual_stages, stages, microbatches));
    if (sync_start < 0) throw UsageError(fmt::format("--sync-start must be >= 0, got {}", sync_start));
    if (sync_cooldown < 0) throw UsageError(fmt::format("--sync-cooldown must be >= 0, got {}", sync_cooldown));
    if (sync_start + sync_cooldown > optimizer_steps())
        throw UsageError(fmt::format(
            "--sync-start {} + --sync-cooldown {} exceed the {} optimizer steps of the run{}", sync_start,
            sync_cooldown, optimizer_steps(),
            kind == ScheduleKind::pipedream ? " (pipedream: one step per microbatch)" : ""));
}

StagePlacement ScheduleSpec::placement() const {
    return {stages, chunks_per_rank(), kind == ScheduleKind::zb_v ? PlacementShape::v : PlacementShape::loop};
}

bool ScheduleSpec::is_synchronous_step(int64_t step) const {
    if (!is_asynchronous(kind)) return true;
    return step < sync_start || step >= optimizer_steps() - sync_cooldown;
}

}  // namespace nb

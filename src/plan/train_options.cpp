#include "src/plan/train_options.h"

#include <fmt/format.h>

namespace nb {

ClipScope parse_clip_scope(std::string_view name) { return kClipScopes.parse(name); }

std::string_view clip_scope_name(ClipScope scope) { return kClipScopes.name(scope); }

ClipScope clip_scope_of(ScheduleKind schedule) {
    return is_asynchronous(schedule) ? ClipScope::stage : ClipScope::global;
}

KillPoint parse_kill_point(std::string_view name) { return kKillPoints.parse(name); }

RunShape TrainOptions::shape() const {
    return {micro_batch_size, num_microbatches, seq_length, stages, data_parallel_size, virtual_stages};
}

void TrainOptions::set_shape(const RunShape& s) {
    micro_batch_size = s.micro_batch_size;
    num_microbatches = s.num_microbatches;
    seq_length = s.seq_length;
    stages = s.stages;
    data_parallel_size = s.data_parallel_size;
    virtual_stages = s.virtual_stages;
}

std::string TrainOptions::describe_update_rule() const {
    std::string rule = "--optimizer " + optimizer.name;
    if (delay_fix.any()) rule += fmt::format(" --delay-fix {}", delay_fix.name());
    if (sync_start > 0) rule += fmt::format(" --sync-start {}", sync_start);
    if (sync_cooldown > 0) rule += fmt::format(" --sync-cooldown {}", sync_cooldown);
    return rule;
}

std::string TrainOptions::describe_stages() const {
    const int chunks = schedule_spec().chunks_per_rank();
    const std::string replicas = data_parallel_size > 1 ? fmt::format(" x {} replicas", data_parallel_size) : "";
    if (chunks == 1) return fmt::format("{} stages{}", stages, replicas);
    return fmt::format("{} stages x {} chunks{}{}", stages, chunks, schedule == ScheduleKind::zb_v ? " in a V" : "",
                       replicas);
}

}  // namespace nb

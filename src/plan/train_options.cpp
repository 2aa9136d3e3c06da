#include "src/plan/train_options.h"

#include <fmt/format.h>

#include "src/core/error.h"

namespace nb {

ClipScope parse_clip_scope(std::string_view name) {
    if (name == "global") return ClipScope::global;
    if (name == "stage") return ClipScope::stage;
    throw UsageError(fmt::format("--clip-scope '{}' is not one of: global, stage", name));
}

std::string_view clip_scope_name(ClipScope scope) { return scope == ClipScope::global ? "global" : "stage"; }

ClipScope clip_scope_of(ScheduleKind schedule) {
    return is_asynchronous(schedule) ? ClipScope::stage : ClipScope::global;
}

KillPoint parse_kill_point(std::string_view name) {
    if (name == "forward") return KillPoint::forward;
    if (name == "receive") return KillPoint::receive;
    if (name == "optimizer") return KillPoint::optimizer;
    if (name == "checkpoint") return KillPoint::checkpoint;
    throw UsageError(fmt::format("--kill-during '{}' is not one of: forward, receive, optimizer, checkpoint", name));
}

std::string TrainOptions::describe_update_rule() const {
    std::string rule = "--optimizer " + optimizer.name;
    if (delay_fix.kind != DelayFixKind::none) rule += fmt::format(" --delay-fix {}", delay_fix_kind_name(delay_fix.kind));
    if (sync_start > 0) rule += fmt::format(" --sync-start {}", sync_start);
    if (sync_cooldown > 0) rule += fmt::format(" --sync-cooldown {}", sync_cooldown);
    return rule;
}

}  // namespace nb

// How often one stage uses each weight version from a run's first step to its end, counted from the schedule's
// rules instead of from its whole action list (which the executor no longer holds: pipeline/schedule/
// action_stream.h). A weight version is used by the forward and the backward (or B and W) of each microbatch whose
// weight_version it is, on every part of the model once; weight_version never falls as the microbatch rises, so
// the microbatches of a version are one range, found by bisection: O(log n) per question, nothing held.
//
// tests/unit/test_action_stream.cpp checks every answer against a count over build_schedule's lists.
#pragma once

#include <cstdint>
#include <map>
#include <optional>

#include "pipeline/schedule/schedule.h"

namespace nb {

class VersionUses {
public:
    // Stage `rank`'s uses in steps [first_step, the run's end) (a resumed run counts from its first step).
    // `optimizer_reads_stale` (--delay-fix taylor): an optimizer step whose gradient came from an older version
    // than W_step also uses that version once.
    VersionUses(const ScheduleSpec& spec, int rank, int64_t first_step, bool optimizer_reads_stale);
    // Tests only (PipelineSetup::fixed_plans): the uses are counted off `plan`, a list that need not follow the
    // schedule's rules (a test that cuts a step out of it).
    void count_from(const StagePlan& plan);

    // The forwards, backwards (B, W) and stale optimizer steps that use W_version.
    int64_t uses(int64_t version) const;
    // The version optimizer step `step`'s gradient was computed at when it reads it stale (older than W_step).
    std::optional<int64_t> stale_version_of_step(int64_t step) const;
    // Whether a forward or backward of step `version` itself uses W_version (a synchronous use; --delay-fix predict
    // predicts only the versions that none has).
    bool has_synchronous_use(int64_t version) const;
    // The oldest version used at all (none older is ever needed again).
    int64_t oldest_used() const;

private:
    int64_t gradient_version(int64_t step) const;  // the version step `step`'s backwards used

    ScheduleSpec spec_;
    int rank_;
    int64_t first_step_, end_step_;
    bool optimizer_reads_stale_;
    std::optional<std::map<int64_t, int64_t>> listed_;  // count_from's counts, by version
};

}  // namespace nb

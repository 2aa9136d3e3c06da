// Test-only faults (the --fail-at-step, --stall-at-step and --kill-at-step flags of the fault tests): how a
// stage misbehaves on purpose, as a wedged or dead node would. Nothing here runs unless a test flag asks.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "src/plan/train_options.h"

namespace nb {

// What the test-only fault flags ask of one rank (replica x stages + stage, the rank the --*-rank flags name):
// the nine fields of TrainOptions that say which rank fails, records a signal, stalls or dies, at which optimizer
// step and where. A rank they do not name never misbehaves.
class FaultPlan {
public:
    FaultPlan(const TrainOptions& options, int rank);

    // As a task of optimizer step `step` begins: --signal-at-step records a SIGTERM, --stall-at-step hangs,
    // --fail-at-step throws its RuntimeError.
    void as_step_begins(int64_t step) const;
    // --kill-at-step with --kill-during `point` on this rank: the step it dies at, else nullopt.
    std::optional<int64_t> kill_step(KillPoint point) const;
    // Dies by SIGKILL where --kill-during `point` at step `step` names this rank.
    void die_if_asked(KillPoint point, int64_t step) const;

private:
    int rank_;
    int64_t fail_at_step_;
    int fail_rank_;
    int64_t signal_at_step_;
    int signal_rank_;
    int64_t stall_at_step_;
    int stall_rank_;
    int64_t kill_at_step_;
    int kill_rank_;
    KillPoint kill_during_;
};

// --stall-at-step: hang as a wedged rank does, without progressing and without ending (only a signal or the
// job's abort ends it).
[[noreturn]] void stall_forever();

// --kill-at-step: the process dies at once by SIGKILL (no handler, no cleanup), as when its node dies.
[[noreturn]] void die_by_sigkill();

// --kill-during checkpoint: dies halfway through writing `path` the way write_file_atomically writes it (its
// temporary name), leaving what a crash mid-write leaves.
[[noreturn]] void die_writing_half(const std::string& path, std::string_view bytes);

}  // namespace nb

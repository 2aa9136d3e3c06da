#include "pipeline/stage/fault_injection.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <thread>

#include <fmt/format.h>

#include "src/core/atomic_file.h"
#include "src/core/error.h"
#include "src/core/stop_signal.h"

namespace nb {

FaultPlan::FaultPlan(const TrainOptions& o, int rank)
    : rank_(rank),
      fail_at_step_(o.fail_at_step),
      fail_rank_(o.fail_rank),
      signal_at_step_(o.signal_at_step),
      signal_rank_(o.signal_rank),
      stall_at_step_(o.stall_at_step),
      stall_rank_(o.stall_rank),
      kill_at_step_(o.kill_at_step),
      kill_rank_(o.kill_rank),
      kill_during_(o.kill_during) {}

void FaultPlan::as_step_begins(int64_t step) const {
    if (rank_ == signal_rank_ && step == signal_at_step_) record_stop_signal(SIGTERM);
    if (rank_ == stall_rank_ && step == stall_at_step_) stall_forever();
    if (rank_ != fail_rank_ || step != fail_at_step_) return;
    throw RuntimeError(fmt::format("injected failure as step {} begins (--fail-at-step {} --fail-rank {})",
                                   fail_at_step_, fail_at_step_, fail_rank_));
}

std::optional<int64_t> FaultPlan::kill_step(KillPoint point) const {
    if (rank_ != kill_rank_ || kill_during_ != point) return std::nullopt;
    return kill_at_step_;
}

void FaultPlan::die_if_asked(KillPoint point, int64_t step) const {
    if (kill_step(point) == step) die_by_sigkill();
}

void stall_forever() {
    for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
}

void die_by_sigkill() {
    // The wall-clock instant, for the fault tests to time how long the job takes to end after it.
    const auto now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                            std::chrono::system_clock::now().time_since_epoch()).count();
    std::fprintf(stderr, "nobubble: test fault: SIGKILL at %lld ns\n", static_cast<long long>(now_ns));
    std::fflush(stderr);
    ::kill(::getpid(), SIGKILL);
    for (;;) ::pause();  // SIGKILL cannot be caught: not reached
}

void die_writing_half(const std::string& path, std::string_view bytes) {
    std::ofstream out(temporary_path_of(path), std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size() / 2));
    out.flush();
    die_by_sigkill();
}

}  // namespace nb

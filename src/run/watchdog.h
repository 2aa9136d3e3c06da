// Watchdog (--watchdog-s, docs/DESIGN.md section 9): under mpirun each rank runs one stage, and a rank whose peer has
// died without MPI noticing, or is wedged (a stuck GPU, a stopped process), would wait in its receive until the
// job's time limit, holding the whole allocation. The MPI driver (mpi_driver.cpp) tells the watchdog whenever
// its stage made progress (a task ran; on rank 0 also the progress collector took something) and whenever it
// looked and could not move; once it has waited for the limit, the rank prints one line naming its stage and
// what it waits for, and ends the job (src/core/job_failure.h). The in-process driver needs none: with every
// stage in one thread, a round in which nothing moves is a deadlock, found at once.
//
// Only waiting counts. A task that computes for longer than the limit does not fire its own rank's watchdog
// (it is checked between tasks), but may fire those of the ranks waiting for it: the limit must exceed the
// longest task, which is why the default is minutes. Time the process itself spent stopped (SIGSTOP, a
// suspended Slurm job) is not waiting either: a look that comes more than kLongestGap after the previous one
// (the loop looks at least every kLongestWait) adds nothing, so a rank that is continued does not fire at once
// for the time it was stopped, and a whole job suspended and resumed does not abort.
#pragma once

#include <chrono>
#include <memory>
#include <vector>
#include <string>

#include "pipeline/stage/stage_runner.h"
#include "src/run/progress_collector.h"

namespace nb {

class Watchdog {
public:
    using Clock = std::chrono::steady_clock;
    // Fires after `limit_s` seconds of waiting without progress, counted from `now`; 0: never.
    explicit Watchdog(double limit_s, Clock::time_point now = Clock::now());

    // The stage moved: the count starts over.
    void progressed(Clock::time_point now = Clock::now());
    // The driver looked and its stage could not move: adds the time since its last look (nothing if that was
    // longer than kLongestGap). True once the waiting adds up to the limit (never when off).
    bool idle(Clock::time_point now = Clock::now());
    // How long the driver may wait for a message before it must look again: the waiting left until the
    // watchdog fires, at most kLongestWait (so that every wait stays bounded, with the watchdog off too).
    std::chrono::milliseconds wait_limit() const;

    double limit_s() const { return limit_s_; }

    static constexpr std::chrono::milliseconds kLongestWait{1000};
    // The longest time between two looks of a running driver: a wait, and a try that could not move (ms).
    static constexpr std::chrono::milliseconds kLongestGap{2000};

private:
    double limit_s_;       // kept in double seconds: a huge limit cannot overflow a clock duration
    double waited_s_ = 0;  // since the last progress
    Clock::time_point last_look_;
};

// What this rank waits for: its runner's next task (with several chunks, each unfinished one's, named by its
// stage), or once they are done, what stage 0's progress collector (`collector`, null on the other ranks) still
// waits for.
std::string rank_waits_for(const std::vector<std::unique_ptr<StageRunner>>& runners,
                           const ProgressCollector* collector);

// "watchdog: rank 2 (stage 2) made no progress for 3 s; it waits for recv_activation mb 6 from stage 1"; `rank`
// as RankLayout::describe names it (src/plan/rank_layout.h: with replicas, "rank 3 (stage 1 of replica 1)").
std::string watchdog_message(const std::string& rank, double limit_s, const std::string& waits_for);

}  // namespace nb

// StopVote: how the stages of a pipeline agree, while they run, on the iteration after which they all stop
// (a SIGTERM or SIGUSR1 reached one of them: docs/DESIGN.md section 9), without a flush and without a stage ever
// starting work that another will not match.
//
// Every stage votes at the end of each iteration j: a non-blocking all-gather {Channel::stop_vote, j} of one
// number, the signal that asked it to stop (src/core/stop_signal.h), else 0. Stages run ahead of each other by
// less than L = max(P, 2) iterations, so a stage needs the vote of iteration j only when it reaches iteration
// j + L; by then every stage has voted and the vote has usually long completed. Its outcome:
//   all 0    iterations up to j + L run (the stage may now start, and post receives for, iteration j + L);
//   any 1    the run stops after iteration j + L - 1: every stage's last started iteration, as none of them
//            could start iteration j + L without this vote. Each stage saves there and finishes.
// So every stage reaches the same stop, nothing is in flight past it, and every stage starts the same
// all-gathers (an MPI rule). A stop is answered within L iterations of the signal.
//
// With D > 1 data-parallel replicas the vote is the whole job's: once a stage has its pipeline's outcome it sends
// it to the same stage of every other replica (point-to-point over the replica transport) and takes
// theirs; the signal is the first asking one in replica order, then stage order, the same on every rank. A stage
// is never more than one iteration ahead of its replicas (each step waits for their gradients), so the vote of
// iteration j is still taken only at j + L, where every rank has voted long ago.
//
// Without --save there is nowhere to save: no votes, every iteration is open (the runner passes enabled=false).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "pipeline/transport/transport.h"

namespace nb {

class StopVote {
public:
    // Iterations [first, end) of a run of `num_stages` stages; `replicas`: the replica transport of stage `stage`
    // when the run has D > 1 replicas (it must outlive the vote), else null.
    StopVote(bool enabled, int num_stages, int64_t first, int64_t end, Transport* replicas = nullptr, int stage = 0);

    // This stage's vote at the end of `iteration` (the runner calls it once per iteration, in order).
    void vote(Transport& transport, int64_t iteration, int stop_signal);
    // True once it is known whether `iteration` runs (then: it runs iff iteration < stop_iteration()); takes the
    // votes that decide it as they arrive, false while one has not.
    bool known(Transport& transport, int64_t iteration);
    // The first iteration that does not run: `end`, or the agreed stop.
    int64_t stop_iteration() const { return stop_; }
    bool stopped_early() const { return stopped_early_; }
    // `iteration` is the last of an agreed early stop (the stages save there whatever --save-interval says).
    bool ends_early_after(int64_t iteration) const { return stopped_early_ && iteration + 1 == stop_; }
    int stop_signal() const { return stop_signal_; }  // the signal of the first stage that asked, once stopped
    // The iterations known to run so far: [first, open_until()]. A stage posts receives only up to it.
    int64_t open_until() const;
    // Whether it is known yet if `iteration` runs (known() without taking any vote: for reports).
    bool decided(int64_t iteration) const { return iteration <= open_until() || iteration >= stop_; }
    // What deciding the next undecided iteration waits for, e.g. "the stop vote after iteration 11 (whether
    // iteration 13 runs)" with ": every stage's all-gather" or ": the other replicas' outcomes": for the watchdog.
    std::string waits_for() const;
    // Takes the outcome of every vote started and not yet taken (before the stage finishes); false while one has
    // not arrived.
    bool drain(Transport& transport);

private:
    bool take_next(Transport& transport);
    bool take_replica_votes(int& signal);
    MessageTag replica_tag() const;

    bool enabled_;
    int num_stages_;
    int64_t lag_;        // L
    int64_t stop_;       // first iteration not run
    int64_t next_take_;  // the vote to take next
    int64_t voted_until_;  // votes started: iterations < voted_until_
    bool stopped_early_ = false;
    int stop_signal_ = 0;
    Transport* replicas_ = nullptr;
    int stage_ = 0;  // the replica messages' tags: {stop_vote, j x num_stages + stage} (a rank's chunks vote apart)
    std::optional<int> pipeline_signal_;  // the vote being taken: its pipeline's outcome, once known
    std::vector<std::optional<double>> replica_signals_;  // ... and each other replica's, as they come
};

}  // namespace nb

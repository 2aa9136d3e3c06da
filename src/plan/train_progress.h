// What one training iteration reports: the human progress line and the `--metrics` record. Shared by `train`
// and `reference`, so that both print the same lines for the same numbers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/core/metrics_writer.h"

namespace nb {

struct IterationReport {
    int64_t iteration = 0;    // 1-based
    int64_t iterations = 0;   // --train-iters
    double loss = 0;          // mean over the iteration's microbatches
    double lr = 0;
    double grad_norm = 0;     // before clipping
    double tokens_per_s = 0;
    double seconds = 0;       // the iteration's wall time, evaluation excluded
    double val_loss = -1;     // -1: not evaluated at this iteration

    // Pipeline runs only (empty / -1 elsewhere: the single-process loop and the oracle print none of them):
    std::vector<double> stage_busy = {};  // per stage, compute time / wall time, 0..1 (pipeline/stage_clock.h)
    double bubble = -1;              // 1 - sum busy / sum wall over the stages
    std::vector<double> act_mib = {};     // per stage, the most MiB of live activation stashes held
};

// Every --log-interval iterations, at the last one, and whenever validation ran.
bool progress_line_due(const IterationReport& r, int64_t log_interval);

// "step      6/6 | loss 5.1234 | lr 1.000e-03 | grad_norm 0.123 | 1234 tok/s | 12.3 ms[ | val_loss 5.0000]", and
// for a pipeline run, before val_loss: " | busy 81% 77% | bubble 21.0% | act MiB 12.1 6.0".
std::string progress_line(const IterationReport& r);

// step, loss, lr, grad_norm, tokens_per_s[, val_loss][, stage_busy (array), bubble, act_mib (array)].
MetricsRecord metrics_record(const IterationReport& r);

// The NaN policy, the one rule every training loop follows: with --stop-on-nan (`stop`, the default) a loss that
// is not finite ends the run, RuntimeError "loss is nan at step N"; with --no-stop-on-nan the run goes on.
void apply_nan_policy(const IterationReport& r, bool stop);

}  // namespace nb

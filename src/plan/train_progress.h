// What one training iteration reports: the human progress line and the `--metrics` record. Shared by `train`
// and `reference`, so that both print the same lines for the same numbers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/moe_load.h"
#include "src/core/metrics_writer.h"

namespace nb {

// One MoE layer over an iteration's training microbatches (model/moe_load.h counts them).
struct MoeLayerFigures {
    int64_t block = 0;
    double aux_loss = 0;          // the layer's aux loss, mean over the microbatches (coefficient included)
    double load_max_over_mean = 0;  // tokens of its busiest expert over the mean, summed over the microbatches
    double idle_fraction = 0;     // of its experts, those that got no token in the whole iteration
};
// From the MoE blocks' counts, in block order, over `microbatches` microbatches.
std::vector<MoeLayerFigures> moe_layer_figures(const std::vector<MoeBlockLoad>& loads, int64_t microbatches);

struct IterationReport {
    int64_t iteration = 0;    // 1-based
    int64_t iterations = 0;   // --train-iters
    double loss = 0;          // mean over the iteration's microbatches
    double lr = 0;
    double grad_norm = 0;     // before clipping
    double tokens_per_s = 0;
    double seconds = 0;       // the iteration's wall time, evaluation excluded
    double val_loss = -1;     // -1: not evaluated at this iteration
    // Seconds since the run began at this iteration's end, evaluation and checkpoints included; a resumed run
    // continues the clock of its checkpoint (-1: not measured).
    double elapsed_s = -1;
    std::string sample;       // the text of --sample-interval's sample at this iteration ("": none), valid UTF-8

    // Pipeline runs only (empty / -1 elsewhere: the single-process loop and the oracle print none of them):
    std::vector<double> stage_busy = {};  // per stage, compute time / wall time, 0..1 (pipeline/stage/stage_clock.h)
    double bubble = -1;              // 1 - sum busy / sum wall over the stages
    std::vector<double> act_mib = {};     // per stage, the most MiB of live activation stashes held

    // MoE models only (empty for a dense one, whose line and record are then as before): per MoE layer.
    std::vector<MoeLayerFigures> moe = {};
    double aux_loss() const;  // the sum over the MoE layers: what the aux losses add to a microbatch's objective
};

// Every --log-interval iterations, at the last one, and whenever validation ran.
bool progress_line_due(const IterationReport& r, int64_t log_interval);

// "step      6/6 | loss 5.1234 | lr 1.000e-03 | grad_norm 0.123 | 1234 tok/s | 12.3 ms[ | val_loss 5.0000]", and
// for a pipeline run, before val_loss: " | busy 81% 77% | bubble 21.0% | act MiB 12.1 6.0". An MoE model adds
// after grad_norm " | aux 0.0123 load max/mean 1.84 (L3) idle 0.12": the aux loss, and the figures of the layer
// with the most uneven load (the largest max/mean, the lower block on a tie).
std::string progress_line(const IterationReport& r);

// step, loss[, aux_loss], lr, grad_norm, tokens_per_s[, val_loss][, elapsed_s][, stage_busy (array), bubble,
// act_mib (array)][, moe_layers, moe_aux_loss, moe_load_max_over_mean, moe_idle_fraction (arrays, per MoE layer)].
MetricsRecord metrics_record(const IterationReport& r);

// The NaN policy, the one rule every training loop follows: with --stop-on-nan (`stop`, the default) a loss that
// is not finite ends the run, RuntimeError "loss is nan at step N"; with --no-stop-on-nan the run goes on.
void apply_nan_policy(const IterationReport& r, bool stop);

}  // namespace nb

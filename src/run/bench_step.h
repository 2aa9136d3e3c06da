// Timing one training step (forward, backward, AdamW, weight refresh) on any backend, for the benchmarks.
#pragma once

#include <string>
#include <vector>

#include "model/config.h"
#include "src/ops/op_profiler.h"
#include "src/ops/ops.h"

namespace nb {

// The dense bf16 peak of an H100/H200 SXM in TFLOP/s: what the GPU benchmarks' MFU divides by.
constexpr double kH100DenseBf16Tflops = 989.0;

struct StepTiming {
    double seconds = 0;        // best of the timed steps
    int64_t tokens = 0;        // per step
    double model_flops = 0;    // per step (model/flops.h)
    int64_t parameters = 0;
};

// One warm-up step, then `steps` timed steps on random tokens; the best is kept.
StepTiming time_training_step(Ops& ops, const ModelConfig& config, int64_t micro_batch_size, int64_t seq_len,
                              int steps);

// One step with every op timed (src/ops/op_profiler.h): where its time goes, largest first, as a table.
void print_step_profile(Ops& ops, const ModelConfig& config, int64_t micro_batch_size, int64_t seq_len);

// The table print_step_profile prints: `report` (an OpProfiler's) of `what`, which took `seconds` profiled.
void print_op_profile(const std::string& what, double seconds, const std::vector<OpTime>& report);

// Muon's Newton-Schulz over every hidden matrix of the model, batched by shape as Muon::step does it, on the
// initial weights (random matrices of the right shapes): one warm-up (cuBLASLt plans), then the best of `reps`,
// each synchronised. Seconds per optimizer step.
double time_newton_schulz(Ops& ops, const ModelConfig& config, int ns_steps, int reps);

// Best wall time of `reps` calls of body(), each followed by ops.synchronize().
template <class F>
double best_seconds(Ops& ops, int reps, F&& body);

}  // namespace nb

#include <algorithm>
#include <chrono>

namespace nb {

template <class F>
double best_seconds(Ops& ops, int reps, F&& body) {
    double best = 1e30;
    for (int r = 0; r < reps; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        body();
        ops.synchronize();
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return best;
}

}  // namespace nb

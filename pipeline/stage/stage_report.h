// What each stage tells stage 0 (rank 0, which prints) at the end of every iteration, and at the end of the run.
// The progress line of iteration t needs the loss (known on the last stage), the norm of the gradient over all
// stages (from every stage's per-parameter sums of squares, added in canonical order: optim/grad_clip.h),
// where validation ran, the validation loss (last stage), each stage's own timing and activation memory
// (pipeline/stage/stage_meter.h), and for an MoE model each of the stage's MoE blocks' aux losses and expert loads over
// the iteration's training forwards (model/moe_load.h; a stage holds only its own blocks). Sent as host doubles,
// so every bit arrives.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/moe_load.h"

namespace nb {

struct StageReport {
    int64_t iteration = 0;               // 0-based
    std::optional<double> loss_sum;      // last stage: the iteration's microbatch losses, added in order
    std::optional<double> val_loss_sum;  // last stage, when validation ran: the evaluation losses, added in order
    double busy_s = 0;                   // compute time since the stage's previous report (stage_meter.h)
    double wall_s = 0;                   // the stage's wall time since its previous report (the first: since start)
    double act_peak_bytes = 0;           // the most bytes of live stashes held since the previous report
    double replica_wait_s = 0;           // data parallelism: its steps' waits for the replicas' gradient sum
    std::vector<MoeBlockLoad> moe;       // the stage's MoE blocks, in block order (none in a dense model)
    std::vector<double> sum_squares;     // per parameter, of the gradient of the iteration's last step

    std::vector<double> to_values() const;
    // std::logic_error when `values` is not what to_values makes.
    static StageReport from_values(const std::vector<double>& values);
    // The most doubles a stage with `num_params` parameter tensors and `moe_blocks` MoE blocks of `num_experts`
    // experts sends.
    static constexpr size_t kHeader = 10;
    static size_t max_values(int num_params, int64_t moe_blocks, int64_t num_experts) {
        return kHeader + static_cast<size_t>(moe_blocks * (3 + num_experts)) + static_cast<size_t>(num_params);
    }
};

// At the end of the run: the most weight versions the stage held at once, its whole run's timing and peak
// activation memory, and how many doubles its trace records (pipeline/stage/stage_clock.h) take, which it sends next
// when --trace asks for them (0 otherwise).
struct StageFinal {
    int64_t peak_versions = 0;
    double busy_s = 0, wall_s = 0;  // from the start of the run to its finish
    double act_peak_bytes = 0;
    int64_t trace_values = 0;

    std::vector<double> to_values() const;
    static StageFinal from_values(const std::vector<double>& values);
    static size_t max_values() { return 5; }
};

// When a stage has written its checkpoint file of step `step` (pipeline/stage/stage_runner.h): what stage 0 needs to
// complete the manifest (src/core/checkpoint_dir.h). The sha256's 64 hex digits travel one per double.
struct CheckpointReport {
    int64_t bytes = 0;
    int64_t steps_taken = 0;  // the stage's optimizer steps so far
    uint64_t data_epoch = 0, data_index = 0;  // the training data's position at the checkpoint
    std::string sha256;
    double clock_s = 0;  // the stage's clock when it wrote the file (its reports' wall times add up to it)

    std::vector<double> to_values() const;
    static CheckpointReport from_values(const std::vector<double>& values);
    static constexpr size_t kValues = 5 + 64;
};

}  // namespace nb

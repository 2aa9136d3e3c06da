// What each stage tells stage 0 (rank 0, which prints) at the end of every iteration, and at the end of the run.
// The progress line of iteration t needs the loss (known on the last stage), the norm of the gradient over all
// stages (from every stage's per-parameter sums of squares, added in canonical order: optim/grad_clip.h) and,
// where validation ran, the validation loss (last stage). Sent as host doubles, so every bit arrives.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace nb {

struct StageReport {
    int64_t iteration = 0;               // 0-based
    std::optional<double> loss_sum;      // last stage: the iteration's microbatch losses, added in order
    std::optional<double> val_loss_sum;  // last stage, when validation ran: the evaluation losses, added in order
    std::vector<double> sum_squares;     // per parameter, of the gradient of the iteration's last step

    std::vector<double> to_values() const;
    // std::logic_error when `values` is not what to_values makes.
    static StageReport from_values(const std::vector<double>& values);
    // The most doubles a stage with `num_params` parameter tensors sends.
    static size_t max_values(int num_params) { return 5 + static_cast<size_t>(num_params); }
};

// At the end of the run: the most weight versions the stage held at once.
struct StageFinal {
    int64_t peak_versions = 0;

    std::vector<double> to_values() const { return {static_cast<double>(peak_versions)}; }
    static StageFinal from_values(const std::vector<double>& values);
    static size_t max_values() { return 1; }
};

}  // namespace nb

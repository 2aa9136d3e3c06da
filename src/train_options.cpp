#include "train_options.h"

#include <cmath>

#include <fmt/format.h>

#include "error.h"

namespace nb {

namespace {

void require_positive(int64_t value, const char* flag) {
    if (value <= 0) throw UsageError(fmt::format("{} must be positive, got {}", flag, value));
}

}  // namespace

void TrainOptions::validate() const {
    model.validate();
    if (data_path.empty()) throw UsageError("--data is required (a text file or llm.c shards *.bin)");
    require_positive(micro_batch_size, "--micro-batch-size");
    require_positive(num_microbatches, "--num-microbatches");
    require_positive(seq_length, "--seq-length");
    require_positive(train_iters, "--train-iters");
    require_positive(log_interval, "--log-interval");
    if (eval_interval < 0) throw UsageError(fmt::format("--eval-interval must be >= 0, got {}", eval_interval));
    if (eval_iters < 0) throw UsageError(fmt::format("--eval-iters must be >= 0, got {}", eval_iters));
    if (!(clip_grad >= 0) || !std::isfinite(clip_grad))
        throw UsageError(fmt::format("--clip-grad must be >= 0, got {}", clip_grad));
    if (!(val_fraction >= 0 && val_fraction < 1))
        throw UsageError(fmt::format("--val-fraction must be in [0, 1), got {}", val_fraction));
    lr.validate(train_iters);
    adamw.validate();
}

}  // namespace nb

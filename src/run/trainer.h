// Trainer: the single-process training loop (the pipeline's StageRunner takes over per stage later).
//
// One iteration = num_microbatches microbatches: their gradients are summed in microbatch order, scaled by
// 1/m, clipped by global norm, then one optimizer step at the scheduled learning rate.
#pragma once

#include <cstdio>
#include <string>

#include "src/plan/train_options.h"

namespace nb {

struct TrainSummary {
    int64_t steps = 0;
    double final_train_loss = 0;  // mean over the last iteration's microbatches
    double final_val_loss = -1;   // -1 when no validation ran
    double tokens_per_s = 0;      // over the whole run, evaluation excluded
    std::string weights_sha256;
};

// Progress lines go to `log`. Throws UsageError / RuntimeError on bad input.
TrainSummary run_training(const TrainOptions& options, std::FILE* log);

}  // namespace nb

// Trainer: the single-process training loop (the pipeline's StageRunner takes over per stage later).
//
// One iteration = num_microbatches microbatches: their gradients are summed in microbatch order, scaled by
// 1/m, clipped by global norm, then one optimizer step at the scheduled learning rate.
#pragma once

#include <cstdio>
#include <string>

#include "src/plan/train_options.h"
#include "src/run/run_log.h"

namespace nb {


// Progress lines go to `log`. Throws UsageError / RuntimeError on bad input.
TrainSummary run_training(const TrainOptions& options, std::FILE* log);

}  // namespace nb

// Trainer: the single-process training loop (the pipeline's StageRunner takes over per stage later).
//
// One iteration = num_microbatches microbatches: their gradients are summed in microbatch order, scaled by
// 1/m, clipped by global norm, then one optimizer step at the scheduled learning rate.
#pragma once

#include <cstdio>
#include <string>

#include "src/plan/run_plan.h"
#include "src/run/run_log.h"

namespace nb {


// Progress lines go to `log`. Throws RuntimeError on bad data (the plan has checked the flags).
TrainSummary run_training(const RunPlan& plan, std::FILE* log);

}  // namespace nb

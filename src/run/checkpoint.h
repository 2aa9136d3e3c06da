// Saving and resuming a run (DESIGN section 8), on the files of src/core/checkpoint_dir.h. So far for the
// single-process loop (src/run/trainer.cpp): its one stage's carried state (pipeline/stage_checkpoint.h), the
// step, the optimizer's step count and the training data's position. The pipeline's stages (each saving after
// its own t-th update, with the weight versions it holds) and the oracle come next; `train` and `reference`
// refuse --save/--load there with a usage error until then.
//
// The manifest's "run" object:
//   identity        what must be the same for a resume to continue the saved run exactly: the model's shape, the
//                   update rule and every optimizer hyperparameter (defaults filled in), the schedule and stages,
//                   the batch shape, the seed and the data. A checkpoint whose identity differs is refused with
//                   the field that differs and both values; nothing else (--train-iters, logging, evaluation,
//                   --save) needs to match.
//   steps_taken     the optimizer's step count, per stage
//   data            the training loader's position (epoch, index)
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "pipeline/stage_state.h"
#include "src/data/batch_loader.h"
#include "src/plan/run_plan.h"

namespace nb {

// Writes the checkpoint of optimizer step `step` (the state after `step` updates) to --save, then applies
// --save-keep. One line to `log` naming the directory.
void save_checkpoint(const RunPlan& plan, int64_t step, StageState& stage, const LoaderPosition& data,
                     std::FILE* log);

struct Resumed {
    int64_t step = 0;      // updates already made: the run continues with optimizer step `step`
    LoaderPosition data;
};
// UsageError when the options ask `where` (a loop that does not checkpoint yet) for --save, --load or
// --exit-interval.
void refuse_checkpoint_flags(const TrainOptions& options, const char* where);

// Reads --load, checks it (files, identity, tensors) and only then restores `stage`. nb::RuntimeError naming the
// file and the field otherwise.
Resumed load_checkpoint(const RunPlan& plan, StageState& stage, std::FILE* log);

}  // namespace nb

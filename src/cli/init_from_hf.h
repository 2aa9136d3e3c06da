// `train --init-from-hf DIR` (and `reference`'s): the run's model is DIR's config.json and its initial weights
// DIR's tensors (src/run/hf_folder.h); a model flag given that says otherwise is one usage error naming both.
// `--pretrained-checkpoint CKPT`: the initial weights of a checkpoint, nothing else of it.
#pragma once

#include "src/cli/commands.h"
#include "src/plan/train_options.h"

namespace nb::cli {

// Sets options.model and options.initial_weights from options.init_from_hf (nothing when it is empty).
// `preset_given`: --model was on the command line (its preset's shape is then checked too). With --load too, the
// run resumes as any other (the checkpoint's weights replace these), so a requeued job keeps its command line.
void apply_init_from_hf(const ModelFlags& flags, bool preset_given, TrainOptions& options);

// Sets options.initial_weights from options.pretrained_checkpoint's newest master weights (nothing when it is
// empty); the model flags give the shape (a tensor of another shape is an error naming it). UsageError with
// --init-from-hf.
void apply_pretrained_checkpoint(TrainOptions& options);

}  // namespace nb::cli

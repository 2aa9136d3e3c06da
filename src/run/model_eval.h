// `nobubble eval` (docs/cli.md): a model's mean loss over the validation windows that `train` validates on, by the
// same code (src/plan/train_data.h validation_loss over forward_loss), so that the two print the same number for
// the same windows, weights and flags: eval_iters x D x m microbatches of B windows of T tokens, from the start of
// the validation split (the last --val-fraction of --data's windows, or --val-data).
#pragma once

#include <cstdint>
#include <string>

#include "model/named_weights.h"
#include "src/plan/train_options.h"

namespace nb {

struct EvalResult {
    double loss = 0;        // nats per token: the mean of the microbatches' mean losses, as train's val_loss
    int64_t microbatches = 0;
    int64_t tokens = 0;
};

// `options`' model with `weights` (every parameter, f32; `source` names them in errors) over `options`' data.
// With a `logits_path`, the logits of the first validation microbatch go there too: f32 little-endian, [B T, V],
// row n the prediction after token n (test-only: the transformers proof compares them position by position).
// nb::UsageError when the options give no validation windows.
EvalResult evaluate_model(const TrainOptions& options, const NamedWeights& weights, const std::string& source,
                          const std::string& logits_path = "");

}  // namespace nb

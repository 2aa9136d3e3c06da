// TrainSampler: the samples `train --sample-interval K` prints, as llm.c prints what its model writes while it
// trains: every K iterations, after evaluation, the newest weights continue --sample-prompt by --sample-tokens
// tokens (src/run/generator.h, with a KV cache), sampled at temperature 1 from a stream seeded by --seed and the
// iteration (a resumed run draws the same samples). Text goes through the run's tokenizer, or is bytes
// (src/run/text_codec.h). The sample reads the weights and changes nothing: the run's bits are the same with or
// without it. One process only: the single-process loop holds the whole model (src/plan/run_plan.cpp refuses more).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/ops/ops.h"
#include "src/plan/train_options.h"
#include "src/run/text_codec.h"

namespace nb {

class TrainSampler {
public:
    // nb::UsageError when the prompt's tokens and --sample-tokens pass --seq-length.
    explicit TrainSampler(const TrainOptions& options);
    bool due(int64_t iteration) const;  // 1-based
    // The prompt and its continuation by the model of `compute_weights` (the whole model's layout), valid UTF-8
    // (an invalid sequence, as a token cut mid-character leaves, becomes U+FFFD).
    std::string sample(Ops& ops, const TensorSet& compute_weights, int64_t iteration) const;

private:
    const TrainOptions& options_;
    TextCodec codec_;
    std::vector<int32_t> prompt_;
};

}  // namespace nb

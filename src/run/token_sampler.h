// TokenSampler: the next token from a row of logits (`nobubble generate`, samples during `train`).
//
//   temperature 0:  greedy, the index of the largest logit (the first of equal ones, as torch.argmax);
//   otherwise:      z = logits / temperature, in double;
//                   top-k (k > 0): only the k largest z stay (equal ones by lower index first);
//                   p = softmax(z) over those;
//                   top-p (p < 1): in order of p, largest first (equal ones by lower index), the shortest prefix
//                   whose sum reaches top_p stays (at least one token), and p is renormalised over it;
//                   the token: the first in that order whose running sum of p passes u * sum, u = Rng::uniform().
// The draws come from our own Rng (src/core/rng.h) seeded once, so a seed gives the same tokens on every machine
// (given the same logits). This is Hugging Face's order of filters (temperature, top-k, top-p), not its random
// stream: a seeded run repeats itself, not transformers' sampling.
#pragma once

#include <cstdint>
#include <span>

#include "src/core/rng.h"

namespace nb {

struct SamplingOptions {
    double temperature = 1.0;  // 0: greedy
    int64_t top_k = 0;         // 0: every token
    double top_p = 1.0;        // 1: every token
    uint64_t seed = 1234;
};

// nb::UsageError naming the flag for a negative temperature or top-k, or a top-p outside (0, 1].
void check_sampling_options(const SamplingOptions& options);

class TokenSampler {
public:
    explicit TokenSampler(const SamplingOptions& options) : options_(options), rng_(options.seed) {}
    int32_t next(std::span<const float> logits);

private:
    SamplingOptions options_;
    Rng rng_;
};

// The index of the largest value, the first of equal ones (greedy decoding).
int32_t argmax(std::span<const float> logits);

}  // namespace nb

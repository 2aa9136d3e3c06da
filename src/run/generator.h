// Generator: autoregressive decoding of a whole model in one process, with a KV cache (model/kv_cache.h):
// `nobubble generate`, `bench generate` and the samples `train --sample-interval` prints.
//
//   prefill: the prompt's P tokens in one forward (positions 0 .. P-1), each block filling its cache;
//   decode:  the last token's logits choose the next token (src/run/token_sampler.h), which runs alone through the
//            model at the next position, reading the cache; until max_new_tokens, or the stop token.
// The same layers and ops as training (model/transformer_block.cpp's forward with LayerContext::kv_cache), so the
// CPU and CUDA backends both decode; only the head's product is cut to the last row.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "model/kv_cache.h"
#include "model/named_weights.h"
#include "model/stage_model.h"
#include "src/ops/ops.h"
#include "src/run/token_sampler.h"

namespace nb {

// The first new token comes from the prefill's logits; each later one from a decode step (one token's forward).
struct GenerationTimes {
    int64_t prefill_tokens = 0, decode_tokens = 0;  // the prompt's tokens; the decode steps run
    double prefill_s = 0, decode_s = 0;  // wall time, the backend synchronized at each end
};

struct GenerationRequest {
    std::vector<int32_t> prompt;          // at least one token
    int64_t max_new_tokens = 0;
    SamplingOptions sampling;
    std::optional<int32_t> stop_token;    // generation ends after it (it is returned); none: max_new_tokens always
    std::function<void(int32_t)> on_token;  // told each new token as it comes (may be empty)
};

class Generator {
public:
    // `weights`: every parameter of `config`'s model (f32, our names; `source` names them in errors). The cache holds
    // `max_positions` positions: a prompt and its new tokens together at most that (the model's sequence length).
    Generator(Ops& ops, const ModelConfig& config, const NamedWeights& weights, const std::string& source,
              int64_t max_positions);
    // The same from compute weights already on `ops`' device, in the layout of `config`'s whole model (the
    // single-process loop's own, read as they are: the samples of `train --sample-interval`).
    Generator(Ops& ops, const ModelConfig& config, TensorSet compute_weights, int64_t max_positions);

    // The new tokens (not the prompt). nb::UsageError for an empty prompt, a token outside the vocabulary, or a
    // prompt and max_new_tokens that pass max_positions.
    std::vector<int32_t> generate(const GenerationRequest& request, GenerationTimes* times = nullptr);
    int64_t max_positions() const { return cache_.capacity(); }

private:
    // The logits (f32, on the host) of the last of `tokens`, which continue the cache's; the cache moves on.
    std::vector<float> forward(std::span<const int32_t> tokens);

    Ops& ops_;
    StageModel model_;
    TensorSet weights_;  // compute weights
    KvCache cache_;
};

}  // namespace nb

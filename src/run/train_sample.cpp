#include "src/run/train_sample.h"

#include <fmt/format.h>

#include "src/core/error.h"
#include "src/core/rng.h"
#include "src/data/utf8.h"
#include "src/run/generator.h"

namespace nb {

TrainSampler::TrainSampler(const TrainOptions& o)
    // Without samples the tokenizer is not read here (the run knows it by identity only).
    : options_(o), codec_(TextCodec::for_model(o.sample_interval > 0 ? o.tokenizer : std::nullopt,
                                               o.model.vocab_size)) {
    if (o.sample_interval <= 0) return;
    if (!o.sample_prompt.empty()) {
        prompt_ = codec_.encode(o.sample_prompt);
    } else if (codec_.end_of_text()) {
        prompt_ = {*codec_.end_of_text()};
    } else {
        prompt_ = codec_.encode("\n");
    }
    const auto tokens = static_cast<int64_t>(prompt_.size()) + o.sample_tokens;
    if (o.sample_interval > 0 && tokens > o.seq_length)
        throw UsageError(fmt::format("--sample-prompt's {} tokens and --sample-tokens {} pass --seq-length {}",
                                     prompt_.size(), o.sample_tokens, o.seq_length));
}

bool TrainSampler::due(int64_t iteration) const {
    return options_.sample_interval > 0 && iteration % options_.sample_interval == 0;
}

std::string TrainSampler::sample(Ops& ops, const TensorSet& compute_weights, int64_t iteration) const {
    Generator generator(ops, options_.model, compute_weights, options_.seq_length);
    GenerationRequest request;
    request.prompt = prompt_;
    request.max_new_tokens = options_.sample_tokens;
    request.sampling.temperature = 1.0;
    request.sampling.seed = Rng::mix(options_.seed, fmt::format("sample.{}", iteration));
    const std::vector<int32_t> ids = generator.generate(request);
    return replace_invalid_utf8(codec_.decode(prompt_) + codec_.decode(ids));
}

}  // namespace nb

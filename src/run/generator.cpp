#include "src/run/generator.h"

#include <chrono>

#include <fmt/format.h>

#include "model/output_head.h"
#include "src/core/error.h"

namespace nb {

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void check_request(const GenerationRequest& r, const ModelConfig& config, int64_t max_positions) {
    if (r.prompt.empty()) throw UsageError("the prompt is empty: give at least one token (or one byte)");
    for (int32_t id : r.prompt)
        if (id < 0 || id >= config.vocab_size)
            throw UsageError(fmt::format("the prompt holds token {}, outside the model's vocabulary of {}", id,
                                         config.vocab_size));
    if (r.max_new_tokens < 0)
        throw UsageError(fmt::format("--max-new-tokens {} must not be negative", r.max_new_tokens));
    const auto prompt = static_cast<int64_t>(r.prompt.size());
    if (prompt > max_positions)
        throw UsageError(fmt::format("the prompt is {} tokens, longer than the model's sequence length {}", prompt,
                                     max_positions));
    if (prompt + r.max_new_tokens > max_positions)
        throw UsageError(fmt::format("the prompt's {} tokens and --max-new-tokens {} pass the model's sequence length "
                                     "{}: ask for at most {} new tokens",
                                     prompt, r.max_new_tokens, max_positions, max_positions - prompt));
    check_sampling_options(r.sampling);
}

}  // namespace

Generator::Generator(Ops& ops, const ModelConfig& config, const NamedWeights& weights, const std::string& source,
                     int64_t max_positions)
    : ops_(ops),
      model_(config, whole_model_spec(config)),
      weights_(make_compute_weights(ops, model_.layout(),
                                    weights_for_layout(model_.layout(), weights, source).to(ops.device()))),
      cache_(ops, config, max_positions) {}

Generator::Generator(Ops& ops, const ModelConfig& config, TensorSet compute_weights, int64_t max_positions)
    : ops_(ops), model_(config, whole_model_spec(config)), weights_(std::move(compute_weights)),
      cache_(ops, config, max_positions) {}

std::vector<float> Generator::forward(std::span<const int32_t> tokens) {
    const auto n = static_cast<int64_t>(tokens.size());
    Tensor host_tokens = Tensor::empty({n}, DType::i32);
    std::copy(tokens.begin(), tokens.end(), host_tokens.i32());
    Microbatch batch;
    batch.tokens = host_tokens.to(ops_.device());
    batch.batch_size = 1;
    batch.seq_len = n;
    LayerContext ctx{ops_, weights_, nullptr, batch};
    ctx.kv_cache = &cache_;
    // The embedding and the blocks; the head (the last layer) computes the last row's logits only.
    const auto& layers = model_.layers();
    Tensor x;
    for (size_t i = 0; i + 1 < layers.size(); ++i) x = layers[i]->forward(ctx, x, nullptr);
    cache_.advance(n);
    const ModelConfig& c = model_.config();
    const Tensor logits = head_logits(ops_, c, model_.layout(), weights_, x.rows(n - 1, n));
    Tensor host = Tensor::empty({c.vocab_size}, DType::f32);
    if (logits.dtype() == DType::f32) {
        host.copy_from(logits.reshaped({c.vocab_size}));
    } else {
        Tensor widened = ops_.f32_output({c.vocab_size});
        ops_.cast(widened, logits.reshaped({c.vocab_size}));
        host.copy_from(widened);
    }
    const float* p = host.f32();
    return {p, p + c.vocab_size};
}

std::vector<int32_t> Generator::generate(const GenerationRequest& r, GenerationTimes* times) {
    check_request(r, model_.config(), max_positions());
    cache_.clear();
    TokenSampler sampler(r.sampling);
    auto started = std::chrono::steady_clock::now();
    std::vector<float> logits = forward(r.prompt);
    GenerationTimes t;
    t.prefill_tokens = static_cast<int64_t>(r.prompt.size());
    t.prefill_s = seconds_since(started);
    started = std::chrono::steady_clock::now();
    std::vector<int32_t> out;
    while (static_cast<int64_t>(out.size()) < r.max_new_tokens) {
        const int32_t next = sampler.next(logits);
        out.push_back(next);
        if (r.on_token) r.on_token(next);
        if (r.stop_token && next == *r.stop_token) break;
        if (static_cast<int64_t>(out.size()) == r.max_new_tokens) break;
        logits = forward(std::span<const int32_t>(&next, 1));
        ++t.decode_tokens;
    }
    t.decode_s = seconds_since(started);
    if (times) *times = t;
    return out;
}

}  // namespace nb

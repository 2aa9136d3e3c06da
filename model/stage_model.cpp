#include "model/stage_model.h"

#include <cmath>
#include <string>

#include "src/core/rng.h"

namespace nb {

StageSpec whole_model_spec(const ModelConfig& config) { return {0, config.num_layers, true, true}; }

StageModel::StageModel(const ModelConfig& config, const StageSpec& spec) : config_(config), spec_(spec) {
    config_.validate();
    // A tied head on a stage without the embedding keeps its own copy under the embedding's name.
    if (spec.has_embedding || (spec.has_head && config.tie_embeddings)) {
        auto embedding = make_embedding_layer(config_, layout_);
        if (spec.has_embedding) layers_.push_back(std::move(embedding));
    }
    for (int64_t i = spec.first_block; i < spec.end_block; ++i)
        layers_.push_back(make_transformer_block(config_, i, layout_));
    if (spec.has_head) layers_.push_back(make_output_head(config_, layout_));
}

namespace {

bool is_residual_projection(const std::string& name) {
    auto ends_with = [&](const char* suffix) {
        std::string s(suffix);
        return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
    };
    return ends_with("attn.wo") || ends_with("mlp.w_down");
}

}  // namespace

TensorSet StageModel::init_weights(uint64_t seed) const {
    TensorSet weights = TensorSet::zeros(layout_);
    const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(config_.num_layers));
    for (int i = 0; i < layout_.size(); ++i) {
        const ParamInfo& info = layout_[i];
        Tensor& t = weights[i];
        if (info.kind == ParamKind::norm_gain) {
            t.fill(1.0f);
            continue;
        }
        const float std = static_cast<float>(is_residual_projection(info.name) ? residual_std : 0.02);
        Rng rng(Rng::mix(seed, info.name));
        float* p = t.f32();
        for (int64_t j = 0, n = t.numel(); j < n; ++j) p[j] = std * rng.normal();
    }
    return weights;
}

int64_t stage_param_count(const ModelConfig& config, const StageSpec& spec) {
    const int64_t d = config.hidden_size, f = config.ffn_hidden_size, kv = config.kv_dim();
    const int64_t per_block = 2 * d + 2 * d * d + 2 * kv * d + 3 * d * f;
    const int64_t embedding = config.vocab_size * d;
    int64_t n = spec.num_blocks() * per_block;
    if (spec.has_embedding) n += embedding;
    if (spec.has_head) {
        n += d;  // final norm
        if (!config.tie_embeddings || !spec.has_embedding) n += embedding;
    }
    return n;
}

int64_t stage_activation_bytes(const ModelConfig& config, const StageSpec& spec, int64_t batch_size,
                               int64_t seq_len) {
    const int64_t rows = batch_size * seq_len;
    const int64_t d = config.hidden_size, f = config.ffn_hidden_size, kv = config.kv_dim();
    // Per block: x, h1, q, attn, x1, h2 (6 d), k, v (2 kv), gate, up, act (3 f), lse (H), rstd1, rstd2 (2).
    const int64_t per_block = rows * (6 * d + 2 * kv + 3 * f + config.num_heads + 2);
    // Head: x, h (2 d), logits (V), lse, rstd (2).
    const int64_t head = rows * (2 * d + config.vocab_size + 2);
    int64_t floats = spec.num_blocks() * per_block + (spec.has_head ? head : 0);
    return floats * 4;
}

}  // namespace nb

#include "model/stage_model.h"

#include <cmath>
#include <string>

#include "src/core/rng.h"

namespace nb {

StageSpec whole_model_spec(const ModelConfig& config) { return {0, config.num_layers, true, true}; }

StageModel::StageModel(const ModelConfig& config, const StageSpec& spec) : config_(config), spec_(spec) {
    config_.validate();
    // A tied head on a stage without the embedding keeps its own copy under the embedding's name.
    auto add = [&](std::unique_ptr<Layer> layer, int first) {
        layers_.push_back(std::move(layer));
        layer_first_param_.push_back(first);
    };
    if (spec.has_embedding || (spec.has_head && config.tie_embeddings)) {
        auto embedding = make_embedding_layer(config_, layout_);
        if (spec.has_embedding) add(std::move(embedding), 0);
    }
    for (int64_t i = spec.first_block; i < spec.end_block; ++i) {
        const int first = layout_.size();
        add(make_transformer_block(config_, i, layout_), first);
    }
    if (spec.has_head) {
        const int first = layout_.size();
        add(make_output_head(config_, layout_), first);
    }
}

// Constant time for a dense model, whose moe_blocks is empty: the partition asks often.
int64_t moe_block_count(const ModelConfig& config, const StageSpec& spec) {
    if (config.moe_blocks.empty()) return 0;
    int64_t n = 0;
    for (int64_t i = spec.first_block; i < spec.end_block; ++i) n += config.is_moe_block(i) ? 1 : 0;
    return n;
}

namespace {

bool is_residual_projection(const std::string& name) {
    auto ends_with = [&](const char* suffix) {
        std::string s(suffix);
        return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
    };
    // mlp.w_down, and in an MoE block each expert's and the shared expert's w_down.
    return ends_with("attn.wo") || ends_with(".w_down");
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
        if (info.kind == ParamKind::expert_bias) continue;  // zero, whatever the seed
        const float std = static_cast<float>(is_residual_projection(info.name) ? residual_std : 0.02);
        Rng rng(Rng::mix(seed, info.name));
        float* p = t.f32();
        for (int64_t j = 0, n = t.numel(); j < n; ++j) p[j] = std * rng.normal();
    }
    return weights;
}

int64_t stage_param_count(const ModelConfig& config, const StageSpec& spec) {
    const int64_t d = config.hidden_size, f = config.ffn_hidden_size, kv = config.kv_dim();
    const int64_t attention = 2 * d + 2 * d * d + 2 * kv * d;
    const MoeConfig& m = config.moe;
    const int64_t moe_mlp = m.num_experts * d + 3 * d * (m.num_experts * m.ffn_hidden_size + m.shared_ffn_hidden_size);
    const int64_t embedding = config.vocab_size * d;
    const int64_t moe = moe_block_count(config, spec);
    int64_t n = spec.num_blocks() * attention + moe * moe_mlp + (spec.num_blocks() - moe) * 3 * d * f;
    if (spec.has_embedding) n += embedding;
    if (spec.has_head) {
        n += d;  // final norm
        if (!config.tie_embeddings || !spec.has_embedding) n += embedding;
    }
    return n;
}

NamedWeights initial_named_weights(const ModelConfig& config, uint64_t seed) {
    const StageModel whole(config, whole_model_spec(config));
    const TensorSet weights = whole.init_weights(seed);
    NamedWeights named;
    for (int i = 0; i < whole.layout().size(); ++i) named.emplace(whole.layout()[i].name, weights[i]);
    return named;
}

}  // namespace nb

#include "model/config.h"

#include <fmt/format.h>

#include "src/core/error.h"

namespace nb {

namespace {

ModelConfig make(std::string name, int64_t vocab, int64_t hidden, int64_t ffn, int64_t layers, int64_t heads,
                 int64_t kv_heads, bool tied) {
    ModelConfig c;
    c.preset = std::move(name);
    c.vocab_size = vocab;
    c.hidden_size = hidden;
    c.ffn_hidden_size = ffn;
    c.num_layers = layers;
    c.num_heads = heads;
    c.num_kv_heads = kv_heads;
    c.tie_embeddings = tied;
    return c;
}

// Byte-level presets (vocab 256) train on a CPU; the SmolLM shapes are the paper's dense models.
const std::vector<ModelConfig>& presets() {
    static const std::vector<ModelConfig> all = {
        make("tiny", 256, 256, 768, 4, 4, 2, false),
        make("small", 256, 512, 1536, 8, 8, 4, false),
        make("smollm-135m", 49152, 576, 1536, 30, 9, 3, true),
        make("smollm-360m", 49152, 960, 2560, 32, 15, 5, true),
    };
    return all;
}

void require_positive(int64_t value, const char* flag) {
    if (value <= 0) throw UsageError(fmt::format("{} must be positive, got {}", flag, value));
}

}  // namespace

void ModelConfig::validate() const {
    require_positive(vocab_size, "--vocab-size");
    require_positive(hidden_size, "--hidden-size");
    require_positive(ffn_hidden_size, "--ffn-hidden-size");
    require_positive(num_layers, "--num-layers");
    require_positive(num_heads, "--num-attention-heads");
    require_positive(num_kv_heads, "--num-query-groups");
    if (hidden_size % num_heads != 0)
        throw UsageError(fmt::format("--hidden-size {} is not divisible by --num-attention-heads {}", hidden_size,
                                     num_heads));
    if (num_heads % num_kv_heads != 0)
        throw UsageError(fmt::format("--num-query-groups {} does not divide --num-attention-heads {}", num_kv_heads,
                                     num_heads));
    if (head_dim() % 2 != 0)
        throw UsageError(fmt::format("head dimension {} (--hidden-size / --num-attention-heads) must be even for RoPE",
                                     head_dim()));
    if (!(rope_theta > 0)) throw UsageError(fmt::format("--rope-theta must be positive, got {}", rope_theta));
    if (!(norm_eps > 0)) throw UsageError(fmt::format("--norm-epsilon must be positive, got {}", norm_eps));
}

ModelConfig model_preset(const std::string& name) {
    for (const auto& p : presets())
        if (p.preset == name) return p;
    throw UsageError(fmt::format("--model: unknown preset '{}' (known: {})", name,
                                 fmt::join(model_preset_names(), ", ")));
}

std::vector<std::string> model_preset_names() {
    std::vector<std::string> names;
    for (const auto& p : presets()) names.push_back(p.preset);
    return names;
}

}  // namespace nb

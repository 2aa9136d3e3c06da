// ModelConfig: the shape of a LLaMA-style decoder, and the named presets.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/moe_config.h"

namespace nb {

struct ModelConfig {
    std::string preset;            // the preset it started from ("custom" after overrides is not tracked)
    int64_t vocab_size = 256;
    int64_t hidden_size = 256;
    int64_t ffn_hidden_size = 768;  // SwiGLU inner size
    int64_t num_layers = 4;
    int64_t num_heads = 4;
    int64_t num_kv_heads = 2;       // grouped-query attention: num_heads % num_kv_heads == 0
    double rope_theta = 10000.0;
    double norm_eps = 1e-5;
    bool tie_embeddings = false;    // LM head shares the embedding matrix

    // Mixture of Experts (docs/DESIGN.md section 7): the blocks whose SwiGLU MLP is an MoeFeedForward.
    std::string moe_layers;         // --moe-layers: "" (none), all, all-but-first:K, or a comma list of block indices
    std::vector<bool> moe_blocks;   // moe_layers parsed against num_layers by resolve_moe_layers()
    MoeConfig moe;                  // the shape of every MoE block (used only when some block is MoE)

    // Parses moe_layers into moe_blocks (UsageError for a pattern that names no existing block).
    void resolve_moe_layers();
    bool is_moe_block(int64_t i) const {
        return i >= 0 && i < static_cast<int64_t>(moe_blocks.size()) && moe_blocks[static_cast<size_t>(i)];
    }
    bool has_moe() const;
    // "none", or the MoE blocks and shape in one line (the checkpoint identity; info).
    std::string describe_moe() const;

    int64_t head_dim() const { return hidden_size / num_heads; }
    int64_t kv_dim() const { return num_kv_heads * head_dim(); }
    // Throws UsageError naming the field (as its command-line flag) when the shape is impossible.
    void validate() const;
};

// Known presets: tiny, tiny-moe, small, smollm-135m, smollm-360m, moe-1b, moe-10b. Unknown name: UsageError
// listing the known ones.
ModelConfig model_preset(const std::string& name);
std::vector<std::string> model_preset_names();

}  // namespace nb

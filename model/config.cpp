#include "model/config.h"

#include <algorithm>
#include <cstdlib>

#include <fmt/format.h>
#include <fmt/ranges.h>

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

// tiny's shape with an MoE feed-forward in every block but the first: 8 experts, top-2, a shared expert.
ModelConfig tiny_moe() {
    ModelConfig c = make("tiny-moe", 256, 256, 768, 4, 4, 2, false);
    c.moe_layers = "all-but-first:1";
    c.moe.num_experts = 8;
    c.moe.topk = 2;
    c.moe.ffn_hidden_size = 192;
    c.moe.shared_ffn_hidden_size = 192;
    c.moe.aux_loss_coeff = 0.01;
    c.moe.topk_renorm = false;
    c.resolve_moe_layers();
    return c;
}

// A DeepSeekMoE-style fine-grained MoE (many small routed experts, top-6, a shared expert twice a routed one's
// size, the first block dense), untied, with the LLaMA attention of the other presets and SmolLM's 49152-token
// vocabulary.
ModelConfig fine_grained_moe(std::string name, int64_t hidden, int64_t dense_ffn, int64_t layers, int64_t heads,
                             int64_t kv_heads, int64_t experts, int64_t expert_ffn) {
    ModelConfig c = make(std::move(name), 49152, hidden, dense_ffn, layers, heads, kv_heads, false);
    c.moe_layers = "all-but-first:1";
    c.moe.num_experts = experts;
    c.moe.topk = 6;
    c.moe.ffn_hidden_size = expert_ffn;
    c.moe.shared_ffn_hidden_size = 2 * expert_ffn;
    c.moe.aux_loss_coeff = 0.001;  // DeepSeekMoE's expert-level balance factor
    c.moe.topk_renorm = false;     // DeepSeekMoE 16B's gates are the plain top-k probabilities
    c.resolve_moe_layers();
    return c;
}

// moe-10b: DeepSeekMoE 16B (2048 hidden, 64 routed experts of 1408, top-6, two shared experts, i.e. one of 2816, the
// first block dense at 10944; 28 blocks: 16.4B total, 2.8B active) cut to 18 blocks, 16 heads of 128 with 4 KV
// heads: 10,165,757,952 parameters, 1,636,116,480 active per token (16%; DeepSeek-V2-Lite: 15.7B, 2.4B active).
// moe-1b: the same at half width and two thirds of the depth (1024 hidden, 12 blocks, 32 experts of 704, 8 heads of
// 128, 2 KV heads): 958,161,920 parameters, 339,633,152 active; `bench moe` times it on a GPU at seq 2048.
ModelConfig moe_10b() { return fine_grained_moe("moe-10b", 2048, 10944, 18, 16, 4, 64, 1408); }
ModelConfig moe_1b() { return fine_grained_moe("moe-1b", 1024, 5472, 12, 8, 2, 32, 704); }

// Byte-level presets (vocab 256) train on a CPU; the SmolLM shapes are the paper's dense models.
const std::vector<ModelConfig>& presets() {
    static const std::vector<ModelConfig> all = {
        make("tiny", 256, 256, 768, 4, 4, 2, false),
        tiny_moe(),
        make("small", 256, 512, 1536, 8, 8, 4, false),
        make("smollm-135m", 49152, 576, 1536, 30, 9, 3, true),
        make("smollm-360m", 49152, 960, 2560, 32, 15, 5, true),
        moe_1b(),
        moe_10b(),
    };
    return all;
}

void require_positive(int64_t value, const char* flag) {
    if (value <= 0) throw UsageError(fmt::format("{} must be positive, got {}", flag, value));
}

// One block index of an explicit --moe-layers list.
int64_t parse_block_index(const std::string& item, const std::string& pattern) {
    if (item.empty() || item.find_first_not_of("0123456789") != std::string::npos || item.size() > 9)
        throw UsageError(fmt::format("--moe-layers '{}': '{}' is not a block index (give all, all-but-first:K, none "
                                     "or a comma list of block indices)",
                                     pattern, item));
    return std::strtoll(item.c_str(), nullptr, 10);
}

std::vector<bool> parse_moe_layers(const std::string& pattern, int64_t num_layers) {
    std::vector<bool> blocks;
    if (pattern.empty() || pattern == "none") return blocks;
    blocks.assign(static_cast<size_t>(std::max<int64_t>(num_layers, 0)), false);
    const std::string but_first = "all-but-first:";
    if (pattern == "all") {
        blocks.assign(blocks.size(), true);
    } else if (pattern.rfind(but_first, 0) == 0) {
        const int64_t k = parse_block_index(pattern.substr(but_first.size()), pattern);
        if (k >= num_layers)
            throw UsageError(fmt::format("--moe-layers '{}' names no block: the model has {} blocks", pattern,
                                         num_layers));
        for (int64_t i = k; i < num_layers; ++i) blocks[static_cast<size_t>(i)] = true;
    } else {
        size_t start = 0;
        while (true) {
            const size_t comma = pattern.find(',', start);
            const std::string item = pattern.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
            const int64_t i = parse_block_index(item, pattern);
            if (i >= num_layers)
                throw UsageError(fmt::format("--moe-layers '{}' names block {}, which does not exist: the model has "
                                             "blocks 0..{}",
                                             pattern, i, num_layers - 1));
            if (blocks[static_cast<size_t>(i)])
                throw UsageError(fmt::format("--moe-layers '{}' names block {} twice", pattern, i));
            blocks[static_cast<size_t>(i)] = true;
            if (comma == std::string::npos) break;
            start = comma + 1;
        }
    }
    return blocks;
}

}  // namespace

void ModelConfig::resolve_moe_layers() { moe_blocks = parse_moe_layers(moe_layers, num_layers); }

bool ModelConfig::has_moe() const { return std::find(moe_blocks.begin(), moe_blocks.end(), true) != moe_blocks.end(); }

std::string ModelConfig::describe_moe() const {
    if (!has_moe()) return "none";
    std::vector<int64_t> list;
    for (int64_t i = 0; i < static_cast<int64_t>(moe_blocks.size()); ++i)
        if (moe_blocks[static_cast<size_t>(i)]) list.push_back(i);
    std::string s = fmt::format("blocks {} experts {} topk {} ffn {} shared {} aux_coeff {} renorm {}",
                                fmt::join(list, ","), moe.num_experts, moe.topk, moe.ffn_hidden_size,
                                moe.shared_ffn_hidden_size, moe.aux_loss_coeff, moe.topk_renorm);
    // Only when on, so that the identity of a run without the bias reads as before it existed.
    if (moe.expert_bias) s += fmt::format(" expert_bias rate {}", moe.bias_update_rate);
    return s;
}

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
    if (parse_moe_layers(moe_layers, num_layers) != moe_blocks)
        throw UsageError(fmt::format("--moe-layers '{}' was not resolved against --num-layers {}", moe_layers,
                                     num_layers));
    if (has_moe()) moe.validate();
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

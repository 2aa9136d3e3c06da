#include "model/hf_names.h"

#include <array>
#include <string_view>
#include <utility>

namespace nb {

namespace {

// A block's leaves: ours after "layers.<i>.", HF's after "model.layers.<i>.".
constexpr std::array<std::pair<std::string_view, std::string_view>, 9> kBlockLeaves = {{
    {"attn_norm.weight", "input_layernorm.weight"},
    {"attn.wq", "self_attn.q_proj.weight"},
    {"attn.wk", "self_attn.k_proj.weight"},
    {"attn.wv", "self_attn.v_proj.weight"},
    {"attn.wo", "self_attn.o_proj.weight"},
    {"mlp_norm.weight", "post_attention_layernorm.weight"},
    {"mlp.w_gate", "mlp.gate_proj.weight"},
    {"mlp.w_up", "mlp.up_proj.weight"},
    {"mlp.w_down", "mlp.down_proj.weight"},
}};

constexpr std::array<std::pair<std::string_view, std::string_view>, 3> kWholeModel = {{
    {"embedding.weight", "model.embed_tokens.weight"},
    {"final_norm.weight", "model.norm.weight"},
    {"lm_head.weight", "lm_head.weight"},
}};

// "<prefix><digits>.<leaf>" split into the block index text and the leaf; nothing if `name` is not so.
std::optional<std::pair<std::string, std::string>> split_block_name(const std::string& name, std::string_view prefix) {
    if (!name.starts_with(prefix)) return std::nullopt;
    const size_t dot = name.find('.', prefix.size());
    if (dot == std::string::npos || dot == prefix.size()) return std::nullopt;
    const std::string index = name.substr(prefix.size(), dot - prefix.size());
    if (index.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
    if (index.size() > 1 && index[0] == '0') return std::nullopt;  // one spelling per block
    return std::pair{index, name.substr(dot + 1)};
}

// The other side's name: kToHf picks the direction through the tables.
template <bool kToHf>
std::optional<std::string> translate(const std::string& name) {
    for (const auto& [ours, hf] : kWholeModel)
        if (name == (kToHf ? ours : hf)) return std::string(kToHf ? hf : ours);
    const std::string_view from_prefix = kToHf ? "layers." : "model.layers.";
    const std::string_view to_prefix = kToHf ? "model.layers." : "layers.";
    const auto split = split_block_name(name, from_prefix);
    if (!split) return std::nullopt;
    for (const auto& [ours, hf] : kBlockLeaves)
        if (split->second == (kToHf ? ours : hf))
            return std::string(to_prefix) + split->first + "." + std::string(kToHf ? hf : ours);
    return std::nullopt;
}

}  // namespace

std::optional<std::string> hf_name_of(const std::string& ours) { return translate<true>(ours); }

std::optional<std::string> our_name_of(const std::string& hf) { return translate<false>(hf); }

}  // namespace nb

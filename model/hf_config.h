// A Hugging Face Llama `config.json` (and `generation_config.json`) from a ModelConfig and back (docs/formats.md,
// "Hugging Face folders"): the fields transformers' LlamaConfig reads, and the refusal of every config whose model
// nobubble does not compute.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "model/config.h"

namespace nb {

// What a config.json holds: the model's shape and what a HF folder says beside it.
struct HfModelConfig {
    ModelConfig model;
    int64_t max_position_embeddings = 2048;  // the export: the run's --seq-length (RoPE itself has no limit here)
    std::string torch_dtype = "float32";     // the tensors' dtype: float32, bfloat16 (an import: also float16)
    std::optional<int64_t> bos_token_id, eos_token_id;
};

// config.json for LlamaForCausalLM, keys sorted as transformers writes them. std::invalid_argument for an MoE
// model (no Llama class computes it; the caller names the reason).
std::string hf_config_json(const HfModelConfig& config);
// generation_config.json: the token ids, where known.
std::string hf_generation_config_json(const HfModelConfig& config);

// The model a config.json describes. nb::RuntimeError "'SOURCE': ..." for text that is not a JSON object or a
// field of the wrong type; nb::UsageError "'SOURCE': ..." naming the field for a model nobubble does not compute:
// model_type other than llama, hidden_act other than silu, rope_scaling, attention_bias or mlp_bias true, a
// sliding window, attention dropout, a head_dim other than hidden_size / num_attention_heads.
HfModelConfig parse_hf_config(const std::string& text, const std::string& source);

}  // namespace nb

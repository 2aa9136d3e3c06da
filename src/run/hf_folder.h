// A Hugging Face LlamaForCausalLM folder written and read (docs/formats.md, "Hugging Face folders"; `nobubble
// export`, `train --init-from-hf`, `eval --hf`):
//   config.json                   model/hf_config.h
//   generation_config.json        the token ids where known
//   model.safetensors             HF's tensor names (model/hf_names.h), {"format": "pt"} metadata, lm_head.weight
//                                 left out when tied; or, above the shard size, model-0000k-of-0000n.safetensors
//                                 and model.safetensors.index.json ({"metadata": {"total_size"}, "weight_map"}),
//                                 cut as transformers' save_pretrained cuts (a tensor starts a new shard where it
//                                 would pass the size, in model order)
//   tokenizer.json, tokenizer_config.json, special_tokens_map.json
//                                 where the model has a tokenizer (src/run/hf_tokenizer.h)
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "model/hf_config.h"
#include "model/named_weights.h"
#include "src/core/name_table.h"
#include "src/core/tensor.h"
#include "src/data/tokenizer_file.h"

namespace nb {

// The dtypes an export writes, under the names config.json's torch_dtype and `export --dtype` use.
inline constexpr auto kHfExportDTypes = name_table<DType>("--dtype", {
    {"float32", DType::f32},
    {"bfloat16", DType::bf16, "rounded to nearest even"},
});

struct HfWriteOptions {
    std::string out_dir;                        // must not exist; written as OUT.tmp.<pid>, then renamed
    DType dtype = DType::f32;                   // f32, or bf16 (rounded to nearest even, as torch's .to())
    int64_t max_shard_bytes = 5'000'000'000;    // transformers' default "5GB"
    std::optional<TokenizerFile> tokenizer = {};  // its files written too (model_max_length: the config's positions)
};

// Writes the folder of `config.model` with `weights` (every parameter of the whole model, f32 on the host); returns
// the bytes of its tensor files. nb::UsageError for an --out that exists; nb::RuntimeError naming the file for
// what the system refuses (the temporary folder is removed then).
int64_t write_hf_folder(const HfModelConfig& config, const NamedWeights& weights, const HfWriteOptions& options);

struct HfModel {
    HfModelConfig config;
    NamedWeights weights;  // our names, f32 (F32 as is; BF16 and F16 widened exactly)
    int64_t file_bytes = 0;
};

// The folder `dir`: config.json (refused by name where nobubble does not compute the model), then single or sharded
// safetensors. nb::RuntimeError naming the file and tensor for a name that is not a Llama parameter of that shape,
// a tensor missing or of another shape, a file that is not safetensors.
HfModel read_hf_folder(const std::string& dir);

}  // namespace nb

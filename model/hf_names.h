// Our parameter names and Hugging Face's LlamaForCausalLM names, one to one (docs/formats.md, "Hugging Face
// folders"). Both keep a linear's weight as [out, in], and our RoPE is HF's rotate-half (src/cpu/rope.cpp), so a
// tensor crosses unchanged: no transpose, no permutation of q/k rows (which HF's own convert script needs only for
// Meta's interleaved-pair checkpoints).
//
//   embedding.weight              model.embed_tokens.weight
//   layers.<i>.attn_norm.weight   model.layers.<i>.input_layernorm.weight
//   layers.<i>.attn.w{q,k,v,o}    model.layers.<i>.self_attn.{q,k,v,o}_proj.weight
//   layers.<i>.mlp_norm.weight    model.layers.<i>.post_attention_layernorm.weight
//   layers.<i>.mlp.w_{gate,up,down}  model.layers.<i>.mlp.{gate,up,down}_proj.weight
//   final_norm.weight             model.norm.weight
//   lm_head.weight                lm_head.weight (absent where tied: HF's tie_word_embeddings)
#pragma once

#include <optional>
#include <string>

namespace nb {

// HF's name of our parameter, or nothing for one that has no Llama counterpart (an MoE block's router, experts
// and expert bias).
std::optional<std::string> hf_name_of(const std::string& ours);

// Our name of HF's tensor, or nothing for a name that is not a Llama parameter we compute (e.g. a rotary
// inv_freq buffer some old exports carry).
std::optional<std::string> our_name_of(const std::string& hf);

}  // namespace nb

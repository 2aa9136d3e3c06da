#include <fmt/format.h>

#include "src/cli/commands.h"
#include "src/core/error.h"

namespace nb::cli {

void add_model_flags(CLI::App& app, ModelFlags& f) {
    app.add_option("--model", f.preset, fmt::format("Model preset: {}", fmt::join(model_preset_names(), ", ")))
        ->capture_default_str();
    app.add_option("--vocab-size", f.vocab_size, "Override the preset's vocabulary size");
    app.add_option("--hidden-size", f.hidden_size, "Override the hidden size");
    app.add_option("--ffn-hidden-size", f.ffn_hidden_size, "Override the SwiGLU inner size");
    app.add_option("--num-layers", f.num_layers, "Override the number of transformer blocks");
    app.add_option("--num-attention-heads", f.num_heads, "Override the number of query heads");
    app.add_option("--num-query-groups", f.num_kv_heads, "Override the number of key/value heads (GQA)");
    app.add_option("--rope-theta", f.rope_theta, "Override the RoPE base");
    app.add_option("--norm-epsilon", f.norm_eps, "Override the RMSNorm epsilon");
    app.add_flag("--untie-embeddings-and-output-weights", f.untie, "Give the LM head its own matrix");
    app.add_flag("--tie-embeddings", f.tie, "Share the embedding matrix with the LM head");
    // Mixture of Experts (docs/DESIGN.md section 7).
    app.add_option("--moe-layers", f.moe_layers,
                   "Blocks whose MLP is an MoE feed-forward: all, all-but-first:K, none, or a comma list of indices");
    app.add_option("--num-experts", f.num_experts, "Routed experts per MoE block");
    app.add_option("--moe-router-topk", f.moe_topk, "Experts each token is routed to (1..8, at most --num-experts)");
    app.add_option("--moe-ffn-hidden-size", f.moe_ffn_hidden_size, "Each routed expert's SwiGLU inner size");
    app.add_option("--moe-shared-expert-ffn-hidden-size", f.moe_shared_ffn_hidden_size,
                   "The shared expert's SwiGLU inner size (0: no shared expert)");
    app.add_option("--moe-aux-loss-coeff", f.moe_aux_loss_coeff, "Switch/GShard load-balancing loss coefficient");
    app.add_flag("--moe-router-topk-renorm", f.moe_topk_renorm, "Renormalise the k gates to sum to 1");
    app.add_flag("--moe-router-enable-expert-bias", f.moe_expert_bias,
                 "Aux-loss-free balancing (DeepSeek-V3): a per-expert bias that only selects, updated each step");
    app.add_option("--moe-router-bias-update-rate", f.moe_bias_update_rate,
                   "Expert bias step: b += rate * sign(mean load - load) per optimizer step (default 1e-3)");
}

ModelConfig resolve_model(const ModelFlags& f) {
    ModelConfig c = model_preset(f.preset);
    // An override given is taken whatever its value (validate() below refuses a bad one); not given, the preset's.
    auto set = [](auto& field, const auto& value) {
        if (value) field = *value;
    };
    set(c.vocab_size, f.vocab_size);
    set(c.hidden_size, f.hidden_size);
    set(c.ffn_hidden_size, f.ffn_hidden_size);
    set(c.num_layers, f.num_layers);
    set(c.num_heads, f.num_heads);
    set(c.num_kv_heads, f.num_kv_heads);
    set(c.rope_theta, f.rope_theta);
    set(c.norm_eps, f.norm_eps);
    if (f.tie && f.untie)
        throw UsageError("--tie-embeddings and --untie-embeddings-and-output-weights contradict each other");
    if (f.tie) c.tie_embeddings = true;
    if (f.untie) c.tie_embeddings = false;

    if (f.moe_layers && f.moe_layers->empty())
        throw UsageError("--moe-layers '': give all, all-but-first:K, none or a comma list of block indices");
    if (f.moe_layers) c.moe_layers = *f.moe_layers == "none" ? "" : *f.moe_layers;
    set(c.moe.num_experts, f.num_experts);
    set(c.moe.topk, f.moe_topk);
    set(c.moe.ffn_hidden_size, f.moe_ffn_hidden_size);
    set(c.moe.shared_ffn_hidden_size, f.moe_shared_ffn_hidden_size);
    set(c.moe.aux_loss_coeff, f.moe_aux_loss_coeff);
    if (f.moe_topk_renorm) c.moe.topk_renorm = true;
    if (f.moe_expert_bias) c.moe.expert_bias = true;
    set(c.moe.bias_update_rate, f.moe_bias_update_rate);
    c.resolve_moe_layers();
    if (!c.has_moe()) {
        const char* given = f.num_experts                  ? "--num-experts"
                            : f.moe_topk                   ? "--moe-router-topk"
                            : f.moe_ffn_hidden_size        ? "--moe-ffn-hidden-size"
                            : f.moe_shared_ffn_hidden_size ? "--moe-shared-expert-ffn-hidden-size"
                            : f.moe_aux_loss_coeff         ? "--moe-aux-loss-coeff"
                            : f.moe_topk_renorm            ? "--moe-router-topk-renorm"
                            : f.moe_expert_bias            ? "--moe-router-enable-expert-bias"
                            : f.moe_bias_update_rate       ? "--moe-router-bias-update-rate"
                                                           : nullptr;
        if (given)
            throw UsageError(fmt::format("{} needs MoE layers: this model has none (give --moe-layers all, "
                                         "all-but-first:K or a list of block indices)",
                                         given));
    }
    if (f.moe_bias_update_rate && !f.moe_expert_bias)
        throw UsageError("--moe-router-bias-update-rate needs --moe-router-enable-expert-bias (the rate of a bias "
                         "that is off)");
    c.validate();
    return c;
}

}  // namespace nb::cli

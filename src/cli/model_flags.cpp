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
}

ModelConfig resolve_model(const ModelFlags& f) {
    ModelConfig c = model_preset(f.preset);
    // -1 means "not given" for every override (a given 0 or negative value is rejected by validate()).
    auto set = [](auto& field, auto value) {
        if (value != -1) field = value;
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
    c.validate();
    return c;
}

}  // namespace nb::cli

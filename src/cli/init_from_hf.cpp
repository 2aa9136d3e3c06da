#include "src/cli/init_from_hf.h"

#include <memory>
#include <optional>
#include <vector>

#include <fmt/format.h>

#include "src/core/error.h"
#include "src/run/hf_folder.h"
#include "src/run/saved_model.h"

namespace nb::cli {

namespace {

// One shape field: its flag, the value the command line gives (if any), config.json's name and value.
struct ShapeField {
    const char* flag;
    std::optional<double> given;
    const char* hf_key;
    double hf_value;
};

std::optional<double> given_value(const std::optional<int64_t>& v) {
    return v ? std::optional<double>(static_cast<double>(*v)) : std::nullopt;
}

std::vector<ShapeField> shape_fields(const ModelFlags& f, const ModelConfig& hf) {
    auto d = [](int64_t v) { return static_cast<double>(v); };
    return {{"--vocab-size", given_value(f.vocab_size), "vocab_size", d(hf.vocab_size)},
            {"--hidden-size", given_value(f.hidden_size), "hidden_size", d(hf.hidden_size)},
            {"--ffn-hidden-size", given_value(f.ffn_hidden_size), "intermediate_size", d(hf.ffn_hidden_size)},
            {"--num-layers", given_value(f.num_layers), "num_hidden_layers", d(hf.num_layers)},
            {"--num-attention-heads", given_value(f.num_heads), "num_attention_heads", d(hf.num_heads)},
            {"--num-query-groups", given_value(f.num_kv_heads), "num_key_value_heads", d(hf.num_kv_heads)},
            {"--rope-theta", f.rope_theta, "rope_theta", hf.rope_theta},
            {"--norm-epsilon", f.norm_eps, "rms_norm_eps", hf.norm_eps}};
}

[[noreturn]] void disagree(const std::string& flag, const std::string& given, const std::string& source,
                           const std::string& key, const std::string& value) {
    throw UsageError(fmt::format("{} {} disagrees with --init-from-hf's '{}': {} {} (leave the model flags out: "
                                 "the shape comes from config.json)", flag, given, source, key, value));
}

void check_flags_agree(const ModelFlags& f, bool preset_given, const ModelConfig& hf, const std::string& source) {
    for (const ShapeField& s : shape_fields(f, hf))
        if (s.given && *s.given != s.hf_value)
            disagree(s.flag, fmt::format("{}", *s.given), source, s.hf_key, fmt::format("{}", s.hf_value));
    if (f.tie && !hf.tie_embeddings) disagree("--tie-embeddings", "", source, "tie_word_embeddings", "false");
    if (f.untie && hf.tie_embeddings)
        disagree("--untie-embeddings-and-output-weights", "", source, "tie_word_embeddings", "true");
    if (f.moe_layers && *f.moe_layers != "none" && !f.moe_layers->empty())
        disagree("--moe-layers", *f.moe_layers, source, "model_type", "llama (no MoE blocks)");
    if (!preset_given) return;
    const ModelConfig preset = model_preset(f.preset);
    ModelFlags as_preset;  // the preset's every field, as if given
    as_preset.vocab_size = preset.vocab_size;
    as_preset.hidden_size = preset.hidden_size;
    as_preset.ffn_hidden_size = preset.ffn_hidden_size;
    as_preset.num_layers = preset.num_layers;
    as_preset.num_heads = preset.num_heads;
    as_preset.num_kv_heads = preset.num_kv_heads;
    for (const ShapeField& s : shape_fields(as_preset, hf))
        if (s.given && *s.given != s.hf_value)
            disagree("--model", fmt::format("{} ({} {})", f.preset, s.flag, *s.given), source, s.hf_key,
                     fmt::format("{}", s.hf_value));
    if (preset.has_moe()) disagree("--model", f.preset, source, "model_type", "llama (no MoE blocks)");
}

}  // namespace

void apply_init_from_hf(const ModelFlags& flags, bool preset_given, TrainOptions& o) {
    if (o.init_from_hf.empty()) return;
    HfModel hf = read_hf_folder(o.init_from_hf);
    check_flags_agree(flags, preset_given, hf.config.model, o.init_from_hf + "/config.json");
    o.model = hf.config.model;
    o.initial_weights = std::make_shared<const NamedWeights>(std::move(hf.weights));
    o.initial_weights_source = o.init_from_hf;
}

void apply_pretrained_checkpoint(TrainOptions& o) {
    if (o.pretrained_checkpoint.empty()) return;
    if (!o.init_from_hf.empty())
        throw UsageError("--init-from-hf and --pretrained-checkpoint both name initial weights: give one");
    SavedModel saved = read_saved_model(o.pretrained_checkpoint);
    o.initial_weights = std::make_shared<const NamedWeights>(std::move(saved.weights));
    o.initial_weights_source = saved.step_dir;
}

}  // namespace nb::cli

// `nobubble info`: parameter count and the per-stage plan (blocks, parameters, memory) for P stages.
#include <fmt/format.h>

#include "src/cli/commands.h"
#include "model/partition.h"
#include "optim/optimizer_registry.h"
#include "pipeline/stage_memory.h"
#include "src/core/byte_size.h"

namespace nb::cli {

namespace {

struct InfoFlags {
    ModelFlags model;
    int stages = 1;
    int64_t micro_batch_size = 8;
    int64_t seq_length = 256;
};

std::string with_commas(int64_t n) {
    std::string digits = std::to_string(n), out;
    for (size_t i = 0; i < digits.size(); ++i) {
        if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
        out += digits[i];
    }
    return out;
}

// The options `train` would run with for this plan: the model and batch shape, AdamW, the CPU's f32.
TrainOptions plan_options(const ModelConfig& c, const InfoFlags& f) {
    TrainOptions o;
    o.model = c;
    o.micro_batch_size = f.micro_batch_size;
    o.seq_length = f.seq_length;
    return o;
}

// "adamw 8 B, muon 4.2 B, ...": each optimizer's state per parameter of the whole model, from the registry.
std::string state_per_parameter(const ModelConfig& c) {
    const ParamLayout layout = trainable_params(StageModel(c, whole_model_spec(c)).layout()).layout;
    std::vector<std::string> parts;
    for (const std::string_view name : optimizer_names()) {
        OptimizerConfig optimizer;
        optimizer.name = std::string(name);
        const double per_param = static_cast<double>(optimizer_state_bytes(optimizer, layout)) /
                                 static_cast<double>(layout.trainable_numel());
        parts.push_back(fmt::format("{} {:.3g} B", name, per_param));
    }
    return fmt::format("{}", fmt::join(parts, ", "));
}

int print_info(const InfoFlags& f) {
    const ModelConfig c = resolve_model(f.model);
    const auto specs = partition_model(c, f.stages);
    const TrainOptions o = plan_options(c, f);
    fmt::print("model {}: {} parameters\n", c.preset, with_commas(stage_param_count(c, whole_model_spec(c))));
    fmt::print("  vocab {}, hidden {}, ffn {}, layers {}, heads {}, kv heads {}, head dim {}, {} embeddings\n",
               c.vocab_size, c.hidden_size, c.ffn_hidden_size, c.num_layers, c.num_heads, c.num_kv_heads,
               c.head_dim(), c.tie_embeddings ? "tied" : "untied");
    fmt::print("pipeline plan: {} stage(s); memory per stage as `train` checks it before it allocates: f32, AdamW, "
               "one weight version, one microbatch of {} x {} tokens\n", f.stages, f.micro_batch_size, f.seq_length);
    fmt::print("  (a schedule adds its weight versions and microbatches in flight; CUDA a bf16 copy of the weights "
               "and bf16 activations)\n");
    fmt::print("  optimizer state per parameter: {}\n", state_per_parameter(c));
    fmt::print("  {:>5}  {:<26} {:>14}  {:>10}  {:>10}  {:>11}  {:>10}  {:>10}\n", "stage", "layers", "parameters",
               "weights", "gradients", "AdamW state", "act/mb", "total");
    for (size_t s = 0; s < specs.size(); ++s) {
        const StageSpec& sp = specs[s];
        std::string layers = fmt::format("{}blocks {}-{}{}", sp.has_embedding ? "embed + " : "", sp.first_block,
                                         sp.end_block - 1, sp.has_head ? " + head" : "");
        const StageMemory m = estimate_cut_memory(o, {sp}, DType::f32);
        fmt::print("  {:>5}  {:<26} {:>14}  {:>10}  {:>10}  {:>11}  {:>10}  {:>10}\n", s, layers,
                   with_commas(stage_param_count(c, sp)), format_bytes(m.weights_bytes),
                   format_bytes(m.gradients_bytes), format_bytes(m.optimizer_bytes),
                   format_bytes(m.activations_bytes), format_bytes(m.total_bytes()));
    }
    return 0;
}

}  // namespace

Command add_info_command(CLI::App& app) {
    auto* sub = app.add_subcommand("info", "Print the parameter count and the per-stage memory plan");
    auto flags = std::make_shared<InfoFlags>();
    add_model_flags(*sub, flags->model);
    sub->add_option("--stages", flags->stages, "Pipeline stages to plan for")->capture_default_str();
    sub->add_option("--micro-batch-size", flags->micro_batch_size, "Sequences per microbatch (activation memory)")
        ->capture_default_str();
    sub->add_option("--seq-length", flags->seq_length, "Tokens per sequence (activation memory)")
        ->capture_default_str();
    return {sub, [flags] { return print_info(*flags); }};
}

}  // namespace nb::cli

// `nobubble info`: parameter count and the per-stage plan (blocks, parameters, memory) for P stages.
#include <fmt/format.h>

#include "src/cli/commands.h"
#include "model/partition.h"

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

double mib(int64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

int print_info(const InfoFlags& f) {
    const ModelConfig c = resolve_model(f.model);
    const auto specs = partition_model(c, f.stages);
    fmt::print("model {}: {} parameters\n", c.preset, with_commas(stage_param_count(c, whole_model_spec(c))));
    fmt::print("  vocab {}, hidden {}, ffn {}, layers {}, heads {}, kv heads {}, head dim {}, {} embeddings\n",
               c.vocab_size, c.hidden_size, c.ffn_hidden_size, c.num_layers, c.num_heads, c.num_kv_heads,
               c.head_dim(), c.tie_embeddings ? "tied" : "untied");
    fmt::print("pipeline plan: {} stage(s); memory in fp32: weights + grads + AdamW m, v = 16 bytes/parameter;\n",
               f.stages);
    fmt::print("  (other optimizers: muon about 12, lion 12, adan 24, mars 20, soap 16 plus its d x d factors)\n");
    fmt::print("  activations per microbatch of {} x {} tokens\n", f.micro_batch_size, f.seq_length);
    fmt::print("  {:>5}  {:<24} {:>14}  {:>12}  {:>14}\n", "stage", "layers", "parameters", "state MiB",
               "act MiB/mb");
    for (size_t s = 0; s < specs.size(); ++s) {
        const StageSpec& sp = specs[s];
        std::string layers = fmt::format("{}blocks {}-{}{}", sp.has_embedding ? "embed + " : "", sp.first_block,
                                         sp.end_block - 1, sp.has_head ? " + head" : "");
        const int64_t params = stage_param_count(c, sp);
        fmt::print("  {:>5}  {:<24} {:>14}  {:>12.1f}  {:>14.1f}\n", s, layers, with_commas(params),
                   mib(16 * params), mib(stage_activation_bytes(c, sp, f.micro_batch_size, f.seq_length)));
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

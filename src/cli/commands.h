// The subcommands of `nobubble`, each registered on the CLI11 app by its own file.
#pragma once

#include <functional>
#include <limits>
#include <string>

#include <CLI/CLI.hpp>

#include "model/config.h"
#include "src/plan/train_options.h"

namespace nb::cli {

// Model shape flags shared by train, info and bench: --model PRESET plus per-field overrides.
struct ModelFlags {
    std::string preset = "tiny";
    int64_t vocab_size = -1, hidden_size = -1, ffn_hidden_size = -1, num_layers = -1, num_heads = -1,
            num_kv_heads = -1;
    double rope_theta = -1, norm_eps = -1;
    bool untie = false, tie = false;
    // MoE (Megatron's names); -1 / NaN / "" = not given.
    int64_t num_experts = -1, moe_topk = -1, moe_ffn_hidden_size = -1, moe_shared_ffn_hidden_size = -1;
    double moe_aux_loss_coeff = std::numeric_limits<double>::quiet_NaN();
    double moe_bias_update_rate = std::numeric_limits<double>::quiet_NaN();
    bool moe_topk_renorm = false, moe_expert_bias = false;
    std::string moe_layers;
};
void add_model_flags(CLI::App& app, ModelFlags& flags);
ModelConfig resolve_model(const ModelFlags& flags);  // preset + overrides, validated

// The stage cut's flags, shared by train, reference, info and bench schedules: --pipeline-cut and
// --pipeline-layout (model/partition.h), as typed.
struct CutFlags {
    std::string cut = "cost";
    std::string layout;
    bool layout_given = false;
};
void add_cut_flags(CLI::App& app, CutFlags& flags);
// The names parsed (UsageError naming the flag), into the options' pipeline_cut and pipeline_layout.
void resolve_cut_flags(const CutFlags& flags, TrainOptions& options);

// The shape of a training-step benchmark (bench ops, bench gpu): a square reference GEMM of gemm_size, then the best
// of `steps` training steps of micro_batch_size x seq_length tokens. Each benchmark gives its own defaults.
struct StepBenchFlags {
    int steps = 5;
    int gemm_size = 0;
    int64_t micro_batch_size = 8;
    int64_t seq_length = 0;
};
// --steps, --gemm-size, --micro-batch-size, --seq-length, each with its default in --help.
void add_step_bench_flags(CLI::App& app, StepBenchFlags& flags);

// A subcommand and what it runs once the whole command line has parsed.
struct Command {
    CLI::App* app;
    std::function<int()> run;
};
Command add_train_command(CLI::App& app);
Command add_info_command(CLI::App& app);
Command add_bench_command(CLI::App& app);
Command add_schedule_command(CLI::App& app);
Command add_reference_command(CLI::App& app);
// `bench gpu`, a subcommand of `bench` (src/cli/bench_gpu_command.cpp).
Command add_bench_gpu_command(CLI::App& bench);
// `bench schedules`: tokens/s, bubble, activation memory and loss per schedule (src/cli/bench_schedules_command.cpp).
Command add_bench_schedules_command(CLI::App& bench);
// `bench checkpoint`: save and load time and rate of a checkpoint (src/cli/bench_checkpoint_command.cpp).
Command add_bench_checkpoint_command(CLI::App& bench);
// `bench moe`: the MoE layer against a dense MLP of the same active FLOPs; on a GPU MoE tokens/s and MFU
// (src/cli/bench_moe_command.cpp).
Command add_bench_moe_command(CLI::App& bench);
// `bench data-parallel`: D pipeline replicas' tokens/s against one's, and the exposed gradient reduction
// (src/cli/bench_data_parallel_command.cpp).
Command add_bench_data_parallel_command(CLI::App& bench);

// Splices the keys of `--config FILE.toml` (given after a subcommand) into args, before the command line's
// own flags so that those win. args[0] is the program name.
std::vector<std::string> expand_config_file(CLI::App& app, std::vector<std::string> args);

}  // namespace nb::cli

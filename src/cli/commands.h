// The subcommands of `nobubble`, each registered on the CLI11 app by its own file.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>

#include <CLI/CLI.hpp>

#include "model/config.h"
#include "src/plan/run_shape.h"
#include "src/plan/train_options.h"

namespace nb::cli {

// The run-shape flags, each declared once for every command that takes it (train, reference, info, schedule and
// the benchmarks): the model (--model and per-field overrides: model_flags.cpp), the batch and pipeline counts
// (RunShape: run_shape_flags.cpp) and the stage cut (--pipeline-cut, --pipeline-layout: run_shape_flags.cpp).
//
// The model: --model PRESET plus per-field overrides. An override holds a value only where it is given, and a value
// given is always checked (ModelConfig::validate), whatever it is.
struct ModelFlags {
    std::string preset = "tiny";
    std::optional<int64_t> vocab_size, hidden_size, ffn_hidden_size, num_layers, num_heads, num_kv_heads;
    std::optional<double> rope_theta, norm_eps;
    bool untie = false, tie = false;
    // MoE (Megatron's names).
    std::optional<int64_t> num_experts, moe_topk, moe_ffn_hidden_size, moe_shared_ffn_hidden_size;
    std::optional<double> moe_aux_loss_coeff, moe_bias_update_rate;
    bool moe_topk_renorm = false, moe_expert_bias = false;
    std::optional<std::string> moe_layers;
};
void add_model_flags(CLI::App& app, ModelFlags& flags);
ModelConfig resolve_model(const ModelFlags& flags);  // preset + overrides, validated

// The batch and pipeline counts of RunShape (src/plan/run_shape.h), one flag each. A command declares the ones it
// takes, its defaults already in the RunShape it holds (shown in --help); check_run_shape checks them (through
// make_run_plan, or called by the command before it uses a count).
enum class ShapeFlag { micro_batch_size, num_microbatches, seq_length, stages, data_parallel_size, virtual_stages };
struct ShapeFlagUse {
    ShapeFlagUse(ShapeFlag flag, std::string note = "", std::string aliases = "")  // implicit: {ShapeFlag::stages}
        : flag(flag), note(std::move(note)), aliases(std::move(aliases)) {}
    ShapeFlag flag;
    std::string note;     // what the count means to this command, after the flag's own help ("" for none)
    std::string aliases;  // other names before the flag's own, comma-separated ("--microbatches"; "" for none)
};
CLI::Option* add_shape_flag(CLI::App& app, RunShape& shape, const ShapeFlagUse& use);
void add_shape_flags(CLI::App& app, RunShape& shape, std::initializer_list<ShapeFlagUse> uses);

// The stage cut: --pipeline-cut and --pipeline-layout (model/partition.h), as typed.
struct CutFlags {
    std::string cut = "cost";
    std::string layout;
    bool layout_given = false;
};
void add_cut_flags(CLI::App& app, CutFlags& flags);
// The names parsed (UsageError naming the flag), into the options' pipeline_cut and pipeline_layout.
void resolve_cut_flags(const CutFlags& flags, TrainOptions& options);

// --seed: a non-negative integer that fits 64 bits; anything else (-1, 2^64, 1.5) is one usage error naming it.
void add_seed_flag(CLI::App& app, uint64_t& seed, const std::string& help);

// The shape of a training-step benchmark (bench ops, bench gpu): a square reference GEMM of gemm_size, then the best
// of `steps` training steps of micro_batch_size x seq_length tokens (in `shape`). Each benchmark gives its own
// defaults.
struct StepBenchFlags {
    int steps = 5;
    int gemm_size = 0;
    RunShape shape;
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
// `export` and `eval`: a checkpoint as a Hugging Face folder; a checkpoint's or folder's validation loss
// (src/cli/export_command.cpp, src/cli/eval_command.cpp).
Command add_export_command(CLI::App& app);
Command add_eval_command(CLI::App& app);
// `generate`: text from a checkpoint or folder with a KV cache (src/cli/generate_command.cpp).
Command add_generate_command(CLI::App& app);
// `tokenize`: a tokenizer.json's byte-level BPE on text or ids (src/cli/tokenize_command.cpp).
Command add_tokenize_command(CLI::App& app);
// `bench gpu`, a subcommand of `bench` (src/cli/bench_gpu_command.cpp).
Command add_bench_gpu_command(CLI::App& bench);
// `bench schedules`: tokens/s, bubble, activation memory and loss per schedule (src/cli/bench_schedules_command.cpp).
Command add_bench_schedules_command(CLI::App& bench);
// `bench recompute`: `bench schedules` under none, selective and full recomputation, with the cut and time paid
// against each schedule's run without (src/cli/bench_schedules_command.cpp).
Command add_bench_recompute_command(CLI::App& bench);
// `bench checkpoint`: save and load time and rate of a checkpoint (src/cli/bench_checkpoint_command.cpp).
Command add_bench_checkpoint_command(CLI::App& bench);
// `bench moe`: the MoE layer against a dense MLP of the same active FLOPs; on a GPU MoE tokens/s and MFU
// (src/cli/bench_moe_command.cpp).
Command add_bench_moe_command(CLI::App& bench);
// `bench data-parallel`: D pipeline replicas' tokens/s against one's, and the exposed gradient reduction
// (src/cli/bench_data_parallel_command.cpp).
Command add_bench_data_parallel_command(CLI::App& bench);
// `bench generate`: generate's prefill and decode tokens/s against transformers' (src/cli/bench_generate_command.cpp).
Command add_bench_generate_command(CLI::App& bench);

// Splices the keys of `--config FILE.toml` (given after a subcommand) into args, before the command line's
// own flags so that those win. args[0] is the program name.
std::vector<std::string> expand_config_file(CLI::App& app, std::vector<std::string> args);

}  // namespace nb::cli

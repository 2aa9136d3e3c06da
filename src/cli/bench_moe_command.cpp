// `nobubble bench moe`: the MoE feed-forward's forward + backward time against a dense SwiGLU MLP of the same
// active FLOPs (src/run/moe_bench.h), at tiny-moe's MoE shape scaled to --hidden-size (512: 8 experts of 384,
// top-2, a shared expert of 384, against a dense MLP of 1152), measured in the same run, and on a GPU
// (--device cuda) also a training step of moe-1b (958M total, 340M active) at seq 2048: tokens/s and MFU over the
// active FLOPs (model/flops.h).
//   Target (issue 12): dense_time / moe_time >= 0.7.
#include <fmt/format.h>

#include "model/flops.h"
#include "model/stage_model.h"
#include "src/cli/commands.h"
#include "src/core/error.h"
#include "src/run/backend.h"
#include "src/run/bench_step.h"
#include "src/run/moe_bench.h"

namespace nb::cli {

namespace {

// tiny-moe's hidden size, whose MoE shape --hidden-size scales.
constexpr int64_t kTinyMoeHidden = 256;

struct BenchMoeFlags {
    std::string device = "cpu";
    int64_t hidden_size = 512;
    int64_t tokens = 2048;
    int reps = 5;
    double target = 0.7;
    // The GPU training step.
    std::string gpu_model = "moe-1b";
    RunShape step_shape{.micro_batch_size = 8, .seq_length = 2048};  // B x T of the GPU step
    int steps = 5;
    bool profile = false;
};

// tiny-moe's MoE (8 experts, top-2, expert and shared sizes 3/4 of the hidden size) at hidden size `hidden`.
MoeLayerShape scaled_tiny_moe(int64_t hidden, int64_t tokens) {
    const MoeConfig tiny = model_preset("tiny-moe").moe;
    if (hidden % 4 != 0)
        throw UsageError(fmt::format("--hidden-size must be a multiple of 4 (tiny-moe's expert sizes are 3/4 of it), "
                                     "got {}", hidden));
    MoeLayerShape shape;
    shape.tokens = tokens;
    shape.hidden = hidden;
    shape.moe = tiny;
    shape.moe.ffn_hidden_size = tiny.ffn_hidden_size * hidden / kTinyMoeHidden;
    shape.moe.shared_ffn_hidden_size = tiny.shared_ffn_hidden_size * hidden / kTinyMoeHidden;
    shape.moe.validate();
    return shape;
}

void print_layer_comparison(Ops& ops, const MoeLayerShape& shape, const BenchMoeFlags& f) {
    const MoeConfig& m = shape.moe;
    fmt::print("MoE feed-forward against a dense SwiGLU MLP of the same active FLOPs, forward + backward through the "
               "ops on {}, best of {} (alternating):\n", device_name(ops.device()), f.reps);
    fmt::print("  shape: tiny-moe scaled to hidden {}: {} tokens, {} experts of ffn {}, top-{}, shared expert ffn {}; "
               "dense ffn {} (= {} x {} + {})\n", shape.hidden, shape.tokens, m.num_experts, m.ffn_hidden_size, m.topk,
               m.shared_ffn_hidden_size, shape.dense_ffn_hidden_size(), m.topk, m.ffn_hidden_size,
               m.shared_ffn_hidden_size);
    const MoeLayerTiming t = time_moe_layer(ops, shape, f.reps);
    fmt::print("  {:<6} {:>10} {:>8} {:>10}\n", "layer", "ms", "GFLOP", "GFLOP/s");
    fmt::print("  {:<6} {:>10.2f} {:>8.2f} {:>10.1f}   (router included; busiest expert {:.2f} x the mean load)\n",
               "moe", t.moe_s * 1e3, t.moe_flops / 1e9, t.moe_flops / t.moe_s / 1e9, t.busiest_expert_load);
    fmt::print("  {:<6} {:>10.2f} {:>8.2f} {:>10.1f}\n", "dense", t.dense_s * 1e3, t.dense_flops / 1e9,
               t.dense_flops / t.dense_s / 1e9);
    const double ratio = t.dense_s / t.moe_s;
    fmt::print("target: dense_time / moe_time >= {:.2f}: measured {:.3f} = {:.2f} x target\n", f.target, ratio,
               ratio / f.target);
}

// One training step of an MoE model on the GPU: tokens/s and MFU over its active FLOPs.
void print_gpu_step(Ops& ops, const BenchMoeFlags& f) {
    const ModelConfig c = model_preset(f.gpu_model);
    const StepTiming t = time_training_step(ops, c, f.step_shape.micro_batch_size, f.step_shape.seq_length, f.steps);
    const double tflops = t.model_flops / t.seconds / 1e12;
    fmt::print("training step of {} ({} parameters, {} active per token) on {}, micro-batch {} x seq {} "
               "(forward + backward + AdamW, best of {}):\n", c.preset, t.parameters,
               stage_active_param_count(c, whole_model_spec(c)), device_name(ops.device()),
               f.step_shape.micro_batch_size, f.step_shape.seq_length, f.steps);
    fmt::print("  {:.1f} ms/step, {:.0f} tokens/s, {:.1f} TFLOP/s over the active FLOPs, MFU {:.1f}% of {:.0f}\n",
               t.seconds * 1e3, static_cast<double>(t.tokens) / t.seconds, tflops,
               100 * tflops / kH100DenseBf16Tflops, kH100DenseBf16Tflops);
}

int run_bench_moe(const BenchMoeFlags& f) {
    check_run_shape(f.step_shape);
    const Device device = parse_device(f.device);
    const MoeLayerShape shape = scaled_tiny_moe(f.hidden_size, f.tokens);  // a bad shape fails before the backend
    std::unique_ptr<Ops> ops = make_ops(device);
    print_layer_comparison(*ops, shape, f);
    if (f.profile) print_moe_layer_profile(*ops, shape);
    if (device == Device::cuda) print_gpu_step(*ops, f);
    return 0;
}

// An option whose default shows in --help and whose value must lie in [lo, hi].
template <typename T>
void add_ranged_option(CLI::App* sub, const std::string& name, T& value, const std::string& description, T lo, T hi) {
    sub->add_option(name, value, description)->capture_default_str()->check(CLI::Range(lo, hi));
}

}  // namespace

Command add_bench_moe_command(CLI::App& bench) {
    auto* sub = bench.add_subcommand("moe", "MoE layer against a dense MLP of the same active FLOPs; GPU: MoE "
                                            "tokens/s and MFU");
    auto flags = std::make_shared<BenchMoeFlags>();
    sub->add_option("--device", flags->device, "cpu, or cuda (also times a training step of --gpu-model)")
        ->capture_default_str();
    add_ranged_option(sub, "--hidden-size", flags->hidden_size, "Hidden size tiny-moe's MoE shape is scaled to",
                      int64_t{4}, int64_t{65536});
    add_ranged_option(sub, "--tokens", flags->tokens, "Tokens through the layer (a microbatch's batch x seq)",
                      int64_t{1}, int64_t{1} << 24);
    add_ranged_option(sub, "--reps", flags->reps, "Repetitions of each (the best is kept)", 1, 1000);
    sub->add_option("--gpu-model", flags->gpu_model, "MoE preset of the GPU training step")->capture_default_str();
    add_shape_flags(*sub, flags->step_shape,
                    {{ShapeFlag::micro_batch_size, "the GPU step's, one per step"},
                     {ShapeFlag::seq_length, "the GPU step's"}});
    add_ranged_option(sub, "--steps", flags->steps, "GPU step: timed steps (the best is kept)", 1, 1000);
    sub->add_flag("--profile", flags->profile, "Also print where each layer's time goes, op by op");
    return {sub, [flags] { return run_bench_moe(*flags); }};
}

}  // namespace nb::cli

// `nobubble bench ops`: the CPU GEMM rate measured in this run, and the training step's throughput and
// model-FLOP utilisation as a ratio of that rate, for the `tiny` and `small` presets.
//   Target (issue #2): the `small` training step reaches >= 30% of the measured GEMM rate.
// `nobubble bench gpu`: the same on one GPU for SmolLM-135M and -360M (cuda/gpu_bench.cpp).
// `nobubble bench schedules`: the schedules side by side on one config (src/cli/bench_schedules_command.cpp).
// `nobubble bench checkpoint`: a checkpoint's save and load against the disk (src/cli/bench_checkpoint_command.cpp).
// `nobubble bench moe`: the MoE layer against a dense MLP of the same active FLOPs (src/cli/bench_moe_command.cpp).
#include <fmt/format.h>

#include "src/run/bench_step.h"
#include "src/cli/commands.h"
#include "src/cpu/cpu_ops.h"

namespace nb::cli {

namespace {

struct BenchOpsFlags {
    StepBenchFlags step{.gemm_size = 2048, .shape = {.micro_batch_size = 8, .seq_length = 256}};
    double target = 0.30;
    bool profile = false;
};

// y[n,n] = x[n,n] W[n,n]^T through the op interface: 2 n^3 FLOPs.
double measure_gemm_gflops(Ops& ops, int n) {
    Tensor x = Tensor::zeros({n, n}), w = Tensor::zeros({n, n}), y = Tensor::zeros({n, n});
    x.fill(0.5f);
    w.fill(0.25f);
    const double seconds = best_seconds(ops, 5, [&] { ops.linear_forward(y, x, w); });
    return 2.0 * n * static_cast<double>(n) * n / seconds / 1e9;
}

int run_bench_ops(const BenchOpsFlags& f) {
    check_run_shape(f.step.shape);
    CpuOps ops;
    const double gemm_gflops = measure_gemm_gflops(ops, f.step.gemm_size);
    fmt::print("cpu sgemm {0}x{0}x{0}: {1:.1f} GFLOP/s (measured now, best of 5)\n", f.step.gemm_size, gemm_gflops);
    fmt::print("training step, micro-batch {} x seq {} (forward + backward + AdamW, best of {}):\n",
               f.step.shape.micro_batch_size, f.step.shape.seq_length, f.step.steps);
    fmt::print("  {:<8} {:>12} {:>10} {:>12} {:>14} {:>14}\n", "model", "params", "ms/step", "tokens/s",
               "model GFLOP/s", "MFU vs sgemm");
    double small_ratio = 0;
    for (const char* name : {"tiny", "small"}) {
        const StepTiming t =
            time_training_step(ops, model_preset(name), f.step.shape.micro_batch_size, f.step.shape.seq_length,
                               f.step.steps);
        const double gflops = t.model_flops / t.seconds / 1e9;
        const double ratio = gflops / gemm_gflops;
        if (std::string(name) == "small") small_ratio = ratio;
        fmt::print("  {:<8} {:>12} {:>10.1f} {:>12.0f} {:>14.1f} {:>13.1f}%\n", name, t.parameters, t.seconds * 1e3,
                   static_cast<double>(t.tokens) / t.seconds, gflops, 100 * ratio);
    }
    if (f.profile)
        for (const char* name : {"tiny", "small"}) {
            fmt::print("{}:\n", name);
            print_step_profile(ops, model_preset(name), f.step.shape.micro_batch_size, f.step.shape.seq_length);
        }
    fmt::print("target: small >= {:.0f}% of the sgemm rate: measured {:.1f}% = {:.2f} x target\n", 100 * f.target,
               100 * small_ratio, small_ratio / f.target);
    return 0;
}

}  // namespace

void add_step_bench_flags(CLI::App& app, StepBenchFlags& flags) {
    app.add_option("--steps", flags.steps, "Timed steps per model")->capture_default_str();
    app.add_option("--gemm-size", flags.gemm_size, "Square GEMM size for the reference rate")->capture_default_str();
    add_shape_flags(app, flags.shape, {{ShapeFlag::micro_batch_size, "one per step"}, {ShapeFlag::seq_length}});
}

Command add_bench_command(CLI::App& app) {
    auto* sub = app.add_subcommand("bench", "Benchmarks (figures with their targets)");
    sub->require_subcommand(1);
    auto ops_flags = std::make_shared<BenchOpsFlags>();
    auto* ops = sub->add_subcommand("ops", "CPU GEMM rate, training throughput and MFU for tiny and small");
    add_step_bench_flags(*ops, ops_flags->step);
    ops->add_flag("--profile", ops_flags->profile, "Also print where one step's time goes, op by op");
    auto gpu = add_bench_gpu_command(*sub);
    auto schedules = add_bench_schedules_command(*sub);
    auto recompute = add_bench_recompute_command(*sub);
    auto checkpoint = add_bench_checkpoint_command(*sub);
    auto moe = add_bench_moe_command(*sub);
    auto data_parallel = add_bench_data_parallel_command(*sub);
    auto generate = add_bench_generate_command(*sub);
    return {sub, [ops_flags, ops, gpu, schedules, recompute, checkpoint, moe, data_parallel, generate] {
                if (ops->parsed()) return run_bench_ops(*ops_flags);
                if (schedules.app->parsed()) return schedules.run();
                if (recompute.app->parsed()) return recompute.run();
                if (checkpoint.app->parsed()) return checkpoint.run();
                if (moe.app->parsed()) return moe.run();
                if (data_parallel.app->parsed()) return data_parallel.run();
                if (generate.app->parsed()) return generate.run();
                return gpu.run();
            }};
}

}  // namespace nb::cli

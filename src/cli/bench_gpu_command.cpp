// `nobubble bench gpu`: one GPU, SmolLM-135M and -360M at sequence length 2048.
// Prints the cuBLASLt bf16 GEMM rate at 8192^3 measured in this run, tokens/s, model-FLOP utilisation against
// the dense bf16 peak of an H100/H200 (989 TFLOP/s) and against that measured GEMM rate, and GPU memory in use.
//   Target (issue #5): >= 45% MFU for smollm-360m on one H200.
// Also times Muon's Newton-Schulz (every hidden matrix, batched by shape as Muon::step does) against the step:
//   Target: Muon overhead <= 3% of the step time.
#include <fmt/format.h>

#include "src/run/backend.h"
#include "src/run/bench_step.h"
#include "src/cli/commands.h"
#include "src/core/error.h"
#include "optim/muon.h"
#ifdef NOBUBBLE_HAVE_CUDA
#include "cuda/attention_cudnn.h"
#include "cuda/cuda_ops.h"
#include "cuda/gemm_bench.h"
#endif

namespace nb::cli {

namespace {

struct BenchGpuFlags {
    StepBenchFlags step{.gemm_size = 8192, .shape = {.micro_batch_size = 8, .seq_length = 2048}};
    std::vector<std::string> models = {"smollm-135m", "smollm-360m"};
    double target_mfu = 0.45;
    double target_muon_share = 0.03;
    // Newton-Schulz runs once per optimizer step, however many microbatches the step accumulates: its share is
    // also shown at a realistic Muon batch (32 x 8 x 2048 = 524k tokens per step, as in the Muon speedruns).
    int64_t muon_microbatches = 32;
    bool profile = false;
};

int run_bench_gpu(const BenchGpuFlags& f) {
    check_run_shape(f.step.shape);
#ifndef NOBUBBLE_HAVE_CUDA
    throw RuntimeError("bench gpu: this nobubble was built without CUDA (configure with -DNOBUBBLE_CUDA=ON)");
#else
    std::unique_ptr<Ops> backend = make_ops(Device::cuda);
    auto& ops = static_cast<cuda::CudaOps&>(*backend);
    const double gemm_tflops = cuda::measure_bf16_gemm_tflops(ops, f.step.gemm_size, 10);
    fmt::print("cuBLASLt bf16 GEMM {0}x{0}x{0}: {1:.1f} TFLOP/s (measured now; dense bf16 peak {2:.0f})\n",
               f.step.gemm_size, gemm_tflops, kH100DenseBf16Tflops);
    fmt::print("training step on one GPU, micro-batch {} x seq {} (forward + backward + AdamW, best of {}):\n",
               f.step.shape.micro_batch_size, f.step.shape.seq_length, f.step.steps);
    fmt::print("  {:<12} {:>12} {:>10} {:>12} {:>10} {:>13} {:>13}\n", "model", "params", "ms/step", "tokens/s",
               "TFLOP/s", "MFU vs 989", "MFU vs GEMM");
    double mfu_360 = -1;
    std::vector<std::string> muon_lines;
    for (const auto& name : f.models) {
        const StepTiming t =
            time_training_step(ops, model_preset(name), f.step.shape.micro_batch_size, f.step.shape.seq_length,
                               f.step.steps);
        const double tflops = t.model_flops / t.seconds / 1e12;
        const double mfu = tflops / kH100DenseBf16Tflops;
        if (name == "smollm-360m") mfu_360 = mfu;
        fmt::print("  {:<12} {:>12} {:>10.1f} {:>12.0f} {:>10.1f} {:>12.1f}% {:>12.1f}%\n", name, t.parameters,
                   t.seconds * 1e3, static_cast<double>(t.tokens) / t.seconds, tflops, 100 * mfu,
                   100 * tflops / gemm_tflops);
        const double ns_seconds = time_newton_schulz(ops, model_preset(name), MuonConfig{}.ns_steps, f.step.steps);
        const double share = ns_seconds / t.seconds;
        const double accumulated_seconds = static_cast<double>(f.muon_microbatches) * t.seconds;
        const double share_accumulated = ns_seconds / (accumulated_seconds + ns_seconds);
        muon_lines.push_back(fmt::format("  {}: {:.2f} ms per Muon step = {:.2f}% of the one-microbatch step "
                                         "(target <= {:.0f}%: {:.2f} x target); with {} microbatches per step "
                                         "(estimated as {} x the measured step): {:.2f}%",
                                         name, ns_seconds * 1e3, 100 * share, 100 * f.target_muon_share,
                                         share / f.target_muon_share, f.muon_microbatches, f.muon_microbatches,
                                         100 * share_accumulated));
    }
    if (f.profile)
        for (const auto& name : f.models) {
            fmt::print("{}:\n", name);
            print_step_profile(ops, model_preset(name), f.step.shape.micro_batch_size, f.step.shape.seq_length);
        }
    if (f.profile) fmt::print("attention: {}\n", cuda::attention_report(ops));
    fmt::print("GPU memory in use at the end (cudaMemGetInfo; the caching allocator keeps its peak): {:.2f} GiB\n",
               static_cast<double>(cuda::device_memory_used_bytes()) / (1u << 30));
    fmt::print("Muon Newton-Schulz ({} steps, bf16, every hidden matrix batched by shape; best of {}):\n",
               MuonConfig{}.ns_steps, f.step.steps);
    for (const auto& line : muon_lines) fmt::print("{}\n", line);
    if (mfu_360 >= 0)
        fmt::print("target: smollm-360m >= {:.0f}% MFU: measured {:.1f}% = {:.2f} x target\n", 100 * f.target_mfu,
                   100 * mfu_360, mfu_360 / f.target_mfu);
    return 0;
#endif
}

}  // namespace

Command add_bench_gpu_command(CLI::App& bench) {
    auto* sub = bench.add_subcommand("gpu", "bf16 GEMM rate, tokens/s and MFU of SmolLM models on one GPU");
    auto flags = std::make_shared<BenchGpuFlags>();
    add_step_bench_flags(*sub, flags->step);
    sub->add_option("--models", flags->models, "Presets to time")->capture_default_str();
    sub->add_option("--muon-microbatches", flags->muon_microbatches,
                    "Microbatches per optimizer step for the Newton-Schulz share at a realistic batch")
        ->capture_default_str()
        ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
    sub->add_flag("--profile", flags->profile, "Also print where one step's time goes, op by op");
    return {sub, [flags] { return run_bench_gpu(*flags); }};
}

}  // namespace nb::cli

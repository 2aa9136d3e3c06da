// `nobubble bench ops`: the CPU GEMM rate measured in this run, and the training step's throughput and
// model-FLOP utilisation as a ratio of that rate, for the `tiny` and `small` presets.
//
// Target (issue #2): the `small` training step reaches >= 30% of the measured GEMM rate.
#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#include "commands.h"
#include "cpu/cpu_ops.h"
#include "model/flops.h"
#include "model_step.h"
#include "optim/adamw.h"
#include "rng.h"

namespace nb::cli {

namespace {

using Clock = std::chrono::steady_clock;

struct BenchFlags {
    int steps = 5;
    int gemm_size = 2048;
    int64_t micro_batch_size = 8;
    int64_t seq_length = 256;
    double target = 0.30;
};

template <class F>
double best_seconds(int reps, F&& body) {
    double best = 1e30;
    for (int r = 0; r < reps; ++r) {
        auto t0 = Clock::now();
        body();
        best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
    }
    return best;
}

// y[n,n] = x[n,n] W[n,n]^T through the op interface: 2 n^3 FLOPs.
double measure_gemm_gflops(Ops& ops, int n) {
    Tensor x = Tensor::zeros({n, n}), w = Tensor::zeros({n, n}), y = Tensor::zeros({n, n});
    x.fill(0.5f);
    w.fill(0.25f);
    const double seconds = best_seconds(5, [&] { ops.linear_forward(y, x, w); });
    return 2.0 * n * static_cast<double>(n) * n / seconds / 1e9;
}

Microbatch random_microbatch(const ModelConfig& c, int64_t batch, int64_t seq_len) {
    Microbatch mb{Tensor::zeros({batch * seq_len}, DType::i32), Tensor::zeros({batch * seq_len}, DType::i32), batch,
                  seq_len};
    Rng rng(42);
    for (int64_t i = 0; i < batch * seq_len; ++i) {
        mb.tokens.i32()[i] = static_cast<int32_t>(rng.below(static_cast<uint64_t>(c.vocab_size)));
        mb.targets.i32()[i] = static_cast<int32_t>(rng.below(static_cast<uint64_t>(c.vocab_size)));
    }
    return mb;
}

// Seconds per training step (forward, backward, AdamW), best of `steps` after one warm-up step.
double measure_step_seconds(Ops& ops, const ModelConfig& c, const BenchFlags& f) {
    StageModel model(c, whole_model_spec(c));
    TensorSet weights = model.init_weights(1);
    TensorSet grads = TensorSet::zeros(model.layout());
    AdamW optimizer(model.layout(), AdamWConfig{});
    Microbatch mb = random_microbatch(c, f.micro_batch_size, f.seq_length);
    auto step = [&] {
        grads.zero();
        forward_backward(ops, model, weights, grads, mb);
        optimizer.step(ops, model.layout(), weights, grads, 1e-4f);
    };
    step();
    return best_seconds(f.steps, step);
}

int run_bench_ops(const BenchFlags& f) {
    CpuOps ops;
    const double gemm_gflops = measure_gemm_gflops(ops, f.gemm_size);
    fmt::print("cpu sgemm {0}x{0}x{0}: {1:.1f} GFLOP/s (measured now, best of 5)\n", f.gemm_size, gemm_gflops);
    fmt::print("training step, micro-batch {} x seq {} (forward + backward + AdamW, best of {}):\n",
               f.micro_batch_size, f.seq_length, f.steps);
    fmt::print("  {:<8} {:>12} {:>10} {:>12} {:>14} {:>14}\n", "model", "params", "ms/step", "tokens/s",
               "model GFLOP/s", "MFU vs sgemm");
    double small_ratio = 0;
    for (const char* name : {"tiny", "small"}) {
        const ModelConfig c = model_preset(name);
        const double seconds = measure_step_seconds(ops, c, f);
        const double tokens = static_cast<double>(f.micro_batch_size * f.seq_length);
        const double gflops = model_flops_per_token(c, f.seq_length) * tokens / seconds / 1e9;
        const double ratio = gflops / gemm_gflops;
        if (std::string(name) == "small") small_ratio = ratio;
        StageModel m(c, whole_model_spec(c));
        fmt::print("  {:<8} {:>12} {:>10.1f} {:>12.0f} {:>14.1f} {:>13.1f}%\n", name, m.layout().total_numel(),
                   seconds * 1e3, tokens / seconds, gflops, 100 * ratio);
    }
    fmt::print("target: small >= {:.0f}% of the sgemm rate: measured {:.1f}% = {:.2f} x target\n", 100 * f.target,
               100 * small_ratio, small_ratio / f.target);
    return 0;
}

}  // namespace

Command add_bench_command(CLI::App& app) {
    auto* sub = app.add_subcommand("bench", "Benchmarks (figures with their targets)");
    sub->require_subcommand(1);
    auto flags = std::make_shared<BenchFlags>();
    auto* ops = sub->add_subcommand("ops", "CPU GEMM rate, training throughput and MFU for tiny and small");
    ops->add_option("--steps", flags->steps, "Timed steps per model")->capture_default_str();
    ops->add_option("--gemm-size", flags->gemm_size, "Square GEMM size for the reference rate")->capture_default_str();
    ops->add_option("--micro-batch-size", flags->micro_batch_size, "Sequences per step")->capture_default_str();
    ops->add_option("--seq-length", flags->seq_length, "Tokens per sequence")->capture_default_str();
    return {sub, [flags, ops] {
                if (ops->parsed()) return run_bench_ops(*flags);
                return 2;
            }};
}

}  // namespace nb::cli

#include "src/run/bench_step.h"

#include "model/flops.h"
#include "model/stage_model.h"
#include "model/model_step.h"
#include "optim/muon.h"
#include "optim/stage_optimizer.h"
#include "src/core/rng.h"
#include "src/ops/op_profiler.h"

#include <fmt/format.h>

namespace nb {

namespace {

Microbatch random_microbatch(const ModelConfig& c, int64_t batch, int64_t seq_len, Device device) {
    Tensor tokens = Tensor::zeros({batch * seq_len}, DType::i32), targets = Tensor::zeros({batch * seq_len}, DType::i32);
    Rng rng(42);
    for (int64_t i = 0; i < batch * seq_len; ++i) {
        tokens.i32()[i] = static_cast<int32_t>(rng.below(static_cast<uint64_t>(c.vocab_size)));
        targets.i32()[i] = static_cast<int32_t>(rng.below(static_cast<uint64_t>(c.vocab_size)));
    }
    return {tokens.to(device), targets.to(device), batch, seq_len};
}

}  // namespace

// Everything one training step touches, on the backend's device.
struct StepState {
    StageModel model;
    TensorSet weights, compute, grads;
    StageOptimizer optimizer;
    Microbatch batch;

    StepState(Ops& ops, const ModelConfig& c, int64_t micro_batch_size, int64_t seq_len)
        : model(c, whole_model_spec(c)),
          weights(model.init_weights(1).to(ops.device())),
          compute(make_compute_weights(ops, model.layout(), weights)),
          grads(TensorSet::zeros(model.layout(), DType::f32, ops.device())),
          optimizer(OptimizerConfig{}, DelayFixConfig{}, model.layout(), 1e-4, ops.device(), c.moe.bias_update_rate),
          batch(random_microbatch(c, micro_batch_size, seq_len, ops.device())) {}

    void step(Ops& ops) {
        grads.zero();
        forward_backward(ops, model, compute, grads, batch);
        optimizer.step(ops, model.layout(), weights, grads, 1e-4f);
        refresh_compute_weights(ops, weights, compute);
    }
};

StepTiming time_training_step(Ops& ops, const ModelConfig& c, int64_t micro_batch_size, int64_t seq_len, int steps) {
    StepState state(ops, c, micro_batch_size, seq_len);
    state.step(ops);  // warm-up: caches, cuBLASLt plans
    StepTiming t;
    t.seconds = best_seconds(ops, steps, [&] { state.step(ops); });
    t.tokens = micro_batch_size * seq_len;
    t.model_flops = model_flops_per_token(c, seq_len) * static_cast<double>(t.tokens);
    t.parameters = state.model.layout().trainable_numel();
    return t;
}

void print_step_profile(Ops& ops, const ModelConfig& c, int64_t micro_batch_size, int64_t seq_len) {
    StepState state(ops, c, micro_batch_size, seq_len);
    state.step(ops);
    const OpProfiler profiler(ops);
    const double seconds = best_seconds(ops, 1, [&] { state.step(ops); });
    print_op_profile("one step", seconds, profiler.report());
}

void print_op_profile(const std::string& what, double seconds, const std::vector<OpTime>& report) {
    double total = 0;
    for (const auto& t : report) total += t.seconds;
    fmt::print("  op profile of {} ({:.1f} ms with a synchronisation around every op; ops sum to {:.1f} ms):\n", what,
               seconds * 1e3, total * 1e3);
    fmt::print("    {:<26} {:>7} {:>10} {:>7}\n", "op", "calls", "ms", "share");
    for (const auto& t : report)
        fmt::print("    {:<26} {:>7} {:>10.2f} {:>6.1f}%\n", t.name, t.calls, t.seconds * 1e3, 100 * t.seconds / total);
}

double time_newton_schulz(Ops& ops, const ModelConfig& c, int ns_steps, int reps) {
    const StageModel model(c, whole_model_spec(c));
    const ParamLayout& layout = model.layout();
    const TensorSet weights = model.init_weights(1).to(ops.device());
    struct Batch {
        std::vector<Tensor> outs;
        std::vector<Tensor*> out_ptrs;
        std::vector<const Tensor*> ins;
    };
    std::vector<Batch> batches;
    for (const std::vector<int>& group : Muon::hidden_matrix_groups(layout)) {
        Batch& b = batches.emplace_back();
        for (int i : group) {
            b.outs.push_back(ops.f32_output(layout[i].shape));
            b.ins.push_back(&weights[i]);
        }
        for (Tensor& t : b.outs) b.out_ptrs.push_back(&t);
    }
    auto run = [&] {
        for (Batch& b : batches) ops.newton_schulz(b.out_ptrs, b.ins, ns_steps);
    };
    run();
    return best_seconds(ops, reps, run);
}

}  // namespace nb

#include "bench_step.h"

#include "model/flops.h"
#include "model/stage_model.h"
#include "model_step.h"
#include "optim/adamw.h"
#include "rng.h"

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

StepTiming time_training_step(Ops& ops, const ModelConfig& c, int64_t micro_batch_size, int64_t seq_len, int steps) {
    const Device device = ops.device();
    StageModel model(c, whole_model_spec(c));
    TensorSet weights = model.init_weights(1).to(device);
    TensorSet compute = make_compute_weights(ops, weights);
    TensorSet grads = TensorSet::zeros(model.layout(), DType::f32, device);
    AdamW optimizer(model.layout(), AdamWConfig{}, device);
    const Microbatch mb = random_microbatch(c, micro_batch_size, seq_len, device);
    auto step = [&] {
        grads.zero();
        forward_backward(ops, model, compute, grads, mb);
        optimizer.step(ops, model.layout(), weights, grads, 1e-4f);
        refresh_compute_weights(ops, weights, compute);
    };
    step();
    StepTiming t;
    t.seconds = best_seconds(ops, steps, step);
    t.tokens = micro_batch_size * seq_len;
    t.model_flops = model_flops_per_token(c, seq_len) * static_cast<double>(t.tokens);
    t.parameters = model.layout().total_numel();
    return t;
}

}  // namespace nb

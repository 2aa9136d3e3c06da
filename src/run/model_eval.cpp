#include "src/run/model_eval.h"

#include <fmt/format.h>

#include "model/model_step.h"
#include "model/output_head.h"
#include "model/stage_model.h"
#include "src/core/atomic_file.h"
#include "src/core/error.h"
#include "src/plan/train_data.h"
#include "src/run/backend.h"

namespace nb {

namespace {

// The logits of `batch`: the blocks' output (a model cut before its head), then the head's norm and product
// (model/output_head.h head_logits, what the head computes before its loss).
Tensor logits_of(Ops& ops, const ModelConfig& model, const NamedWeights& weights, const std::string& source,
                 const Microbatch& batch) {
    const StageModel body(model, {0, model.num_layers, true, false});
    const TensorSet body_master = weights_for_layout(body.layout(), weights, source).to(ops.device());
    const TensorSet body_weights = make_compute_weights(ops, body.layout(), body_master);
    const Tensor x = stage_forward(body, LayerContext{ops, body_weights, nullptr, batch}, Tensor{}, nullptr);
    const StageModel whole(model, whole_model_spec(model));
    const TensorSet all = make_compute_weights(ops, whole.layout(),
                                               weights_for_layout(whole.layout(), weights, source).to(ops.device()));
    return head_logits(ops, model, whole.layout(), all, x).to(Device::cpu);
}

void dump_first_logits(Ops& ops, const TrainOptions& o, BatchLoader& val, const NamedWeights& weights,
                       const std::string& source, const std::string& path) {
    val.reset();
    MicrobatchReader reader(o);
    const Tensor logits = logits_of(ops, o.model, weights, source, reader.next(val, ops.device()));
    if (logits.dtype() != DType::f32) throw UsageError("--dump-logits takes f32 logits: give --device cpu");
    write_file_atomically(path, std::string_view(static_cast<const char*>(logits.data()), logits.bytes()));
}

}  // namespace

EvalResult evaluate_model(const TrainOptions& o, const NamedWeights& weights, const std::string& source,
                          const std::string& logits_path) {
    const auto data = open_train_data(o);
    if (!data->val)
        throw UsageError("no validation windows to evaluate on: give --val-data, or a --val-fraction above 0 "
                         "(and --eval-iters above 0)");
    std::unique_ptr<Ops> backend = make_ops(o.device);
    Ops& ops = *backend;
    const StageModel model(o.model, whole_model_spec(o.model));
    const TensorSet master = weights_for_layout(model.layout(), weights, source).to(ops.device());
    const TensorSet compute = make_compute_weights(ops, model.layout(), master);
    EvalResult r;
    r.microbatches = o.eval_iters * o.microbatches_per_iter();
    r.tokens = r.microbatches * o.micro_batch_size * o.seq_length;
    r.loss = validation_loss(*data->val, o, ops.device(),
                             [&](const Microbatch& mb) { return forward_loss(ops, model, compute, mb); });
    if (!logits_path.empty()) dump_first_logits(ops, o, *data->val, weights, source, logits_path);
    return r;
}

}  // namespace nb

#include "trainer.h"

#include <chrono>
#include <cmath>
#include <memory>
#include <optional>

#include <fmt/format.h>

#include "cpu/cpu_ops.h"
#include "data/batch_loader.h"
#include "error.h"
#include "metrics_writer.h"
#include "model_step.h"
#include "optim/adamw.h"
#include "optim/grad_clip.h"
#include "weights_hash.h"

namespace nb {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

void check_vocab(const TokenCorpus& corpus, const ModelConfig& model) {
    if (corpus.num_tokens() > 0 && corpus.max_token() >= model.vocab_size)
        throw RuntimeError(fmt::format("data '{}': token id {} is outside the model's vocabulary of {} (--vocab-size)",
                                       corpus.source(), corpus.max_token(), model.vocab_size));
}

Microbatch make_microbatch(const TrainOptions& o) {
    const int64_t rows = o.micro_batch_size * o.seq_length;
    return {Tensor::zeros({rows}, DType::i32), Tensor::zeros({rows}, DType::i32), o.micro_batch_size, o.seq_length};
}

// Mean loss over eval_iters * num_microbatches validation microbatches, always the same ones.
double evaluate(Ops& ops, const StageModel& model, const TensorSet& weights, BatchLoader& val, const TrainOptions& o) {
    val.reset();
    Microbatch mb = make_microbatch(o);
    const int64_t count = o.eval_iters * o.num_microbatches;
    double total = 0;
    for (int64_t i = 0; i < count; ++i) {
        val.next(mb.tokens, mb.targets);
        total += forward_loss(ops, model, weights, mb);
    }
    return total / static_cast<double>(count);
}

// The data: a training loader, and a validation loader when there is something to validate on.
struct DataLoaders {
    TokenCorpus corpus;
    std::optional<TokenCorpus> val_corpus;
    std::unique_ptr<BatchLoader> train, val;
};

std::unique_ptr<DataLoaders> open_data(const TrainOptions& o) {
    auto d = std::make_unique<DataLoaders>(DataLoaders{TokenCorpus::open(o.data_path), std::nullopt, nullptr, nullptr});
    check_vocab(d->corpus, o.model);
    SplitSpec split;
    if (!o.val_data_path.empty()) {
        d->val_corpus.emplace(TokenCorpus::open(o.val_data_path));
        check_vocab(*d->val_corpus, o.model);
        split.val_corpus = &*d->val_corpus;
    } else {
        split.val_fraction = o.val_fraction;
    }
    d->train = std::make_unique<BatchLoader>(d->corpus, Split::train, split, o.micro_batch_size, o.seq_length, o.seed);
    const bool has_val = split.val_corpus || o.val_fraction > 0;
    if (has_val && o.eval_iters > 0)
        d->val = std::make_unique<BatchLoader>(d->corpus, Split::val, split, o.micro_batch_size, o.seq_length, o.seed);
    return d;
}

}  // namespace

TrainSummary run_training(const TrainOptions& o, std::FILE* log) {
    o.validate();
    auto data = open_data(o);
    std::unique_ptr<MetricsWriter> metrics;
    if (!o.metrics_path.empty()) metrics = std::make_unique<MetricsWriter>(o.metrics_path);

    CpuOps ops;
    StageModel model(o.model, whole_model_spec(o.model));
    TensorSet weights = model.init_weights(o.seed);
    TensorSet grads = TensorSet::zeros(model.layout());
    AdamW optimizer(model.layout(), o.adamw);
    LrSchedule schedule(o.lr, o.train_iters);
    Microbatch mb = make_microbatch(o);

    fmt::print(log, "nobubble: model {} ({} parameters), {} train windows, {} tokens per iteration\n",
               o.model.preset, model.layout().total_numel(), data->train->num_windows(), o.tokens_per_iter());

    TrainSummary summary;
    double train_seconds = 0;
    for (int64_t step = 0; step < o.train_iters; ++step) {
        const auto t0 = Clock::now();
        grads.zero();
        double loss_sum = 0;
        for (int64_t i = 0; i < o.num_microbatches; ++i) {
            data->train->next(mb.tokens, mb.targets);
            loss_sum += forward_backward(ops, model, weights, grads, mb);
        }
        const double loss = loss_sum / static_cast<double>(o.num_microbatches);
        if (o.num_microbatches > 1)
            for (auto& g : grads.tensors) ops.scale_inplace(g, 1.0f / static_cast<float>(o.num_microbatches));
        const double grad_norm = clip_grad_norm(ops, grads, o.clip_grad);
        const double lr = schedule.lr_at(step);
        optimizer.step(ops, model.layout(), weights, grads, static_cast<float>(lr));
        const double step_seconds = seconds_since(t0);
        train_seconds += step_seconds;
        const double tokens_per_s = static_cast<double>(o.tokens_per_iter()) / step_seconds;

        const bool last = step + 1 == o.train_iters;
        double val_loss = -1;
        if (data->val && (last || (o.eval_interval > 0 && (step + 1) % o.eval_interval == 0)))
            val_loss = evaluate(ops, model, weights, *data->val, o);

        if ((step + 1) % o.log_interval == 0 || last || val_loss >= 0) {
            std::string line = fmt::format("step {:>6}/{} | loss {:.4f} | lr {:.3e} | grad_norm {:.3f} | {:.0f} tok/s | {:.1f} ms",
                                           step + 1, o.train_iters, loss, lr, grad_norm, tokens_per_s, step_seconds * 1e3);
            if (val_loss >= 0) line += fmt::format(" | val_loss {:.4f}", val_loss);
            fmt::print(log, "{}\n", line);
            std::fflush(log);
        }
        if (metrics) {
            MetricsRecord r;
            r.add("step", step + 1);
            r.add("loss", loss);
            r.add("lr", lr);
            r.add("grad_norm", grad_norm);
            r.add("tokens_per_s", tokens_per_s);
            if (val_loss >= 0) r.add("val_loss", val_loss);
            metrics->write(r);
        }
        summary.final_train_loss = loss;
        if (val_loss >= 0) summary.final_val_loss = val_loss;
        if (!std::isfinite(loss)) throw RuntimeError(fmt::format("loss is {} at step {}", loss, step + 1));
    }
    summary.steps = o.train_iters;
    summary.tokens_per_s = static_cast<double>(o.tokens_per_iter() * o.train_iters) / train_seconds;
    summary.weights_sha256 = weights_sha256(weights);
    return summary;
}

}  // namespace nb

#include "src/plan/train_data.h"

#include <fmt/format.h>

#include "src/core/error.h"

namespace nb {

namespace {

void check_vocab(const TokenCorpus& corpus, const ModelConfig& model) {
    if (corpus.num_tokens() > 0 && corpus.max_token() >= model.vocab_size)
        throw RuntimeError(fmt::format("data '{}': token id {} is outside the model's vocabulary of {} (--vocab-size)",
                                       corpus.source(), corpus.max_token(), model.vocab_size));
}

}  // namespace

std::unique_ptr<TrainData> open_train_data(const TrainOptions& o) {
    auto d = std::make_unique<TrainData>(TrainData{TokenCorpus::open(o.data_path), std::nullopt, nullptr, nullptr});
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

MicrobatchReader::MicrobatchReader(const TrainOptions& o) {
    const int64_t rows = o.micro_batch_size * o.seq_length;
    host_ = {Tensor::zeros({rows}, DType::i32), Tensor::zeros({rows}, DType::i32), o.micro_batch_size, o.seq_length};
}

Microbatch MicrobatchReader::next(BatchLoader& loader, Device device) {
    loader.next(host_.tokens, host_.targets);
    return {host_.tokens.to(device), host_.targets.to(device), host_.batch_size, host_.seq_len};
}

bool evaluation_due(const TrainOptions& o, int64_t iteration) {
    const bool last = iteration + 1 == o.train_iters;
    return last || (o.eval_interval > 0 && (iteration + 1) % o.eval_interval == 0);
}

double validation_loss(BatchLoader& val, const TrainOptions& o, Device device,
                       const std::function<float(const Microbatch&)>& loss_of) {
    val.reset();
    MicrobatchReader reader(o);
    const int64_t count = o.eval_iters * o.microbatches_per_iter();
    double total = 0;
    for (int64_t i = 0; i < count; ++i) total += loss_of(reader.next(val, device));
    return total / static_cast<double>(count);
}

}  // namespace nb

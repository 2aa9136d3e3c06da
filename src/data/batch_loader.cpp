#include "src/data/batch_loader.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "src/core/error.h"
#include "src/core/rng.h"

namespace nb {

namespace {

int64_t file_windows(int64_t file_tokens, int64_t seq_len) {
    // Window k needs tokens up to k*T + T, so k*T + T + 1 <= n.
    return file_tokens < seq_len + 1 ? 0 : (file_tokens - 1) / seq_len;
}

const char* split_name(Split s) { return s == Split::train ? "train" : "val"; }

}  // namespace

int64_t count_windows(const TokenCorpus& corpus, int64_t seq_len) {
    int64_t total = 0;
    for (int i = 0; i < corpus.num_files(); i++)
        total += file_windows(corpus.file_num_tokens(i), seq_len);
    return total;
}

int64_t val_window_count(int64_t total_windows, double val_fraction) {
    const double exact = val_fraction * static_cast<double>(total_windows);
    const double nearest = std::nearbyint(exact);
    double count = std::fabs(exact - nearest) <= 1e-9 * std::max(1.0, exact) ? nearest : std::ceil(exact);
    // A positive fraction always holds out something, as the ceiling promises (the tolerance must not eat it).
    if (val_fraction > 0.0 && count < 1.0) count = 1.0;
    return std::clamp(static_cast<int64_t>(count), int64_t{0}, total_windows);
}

BatchLoader::BatchLoader(const TokenCorpus& corpus, Split which, const SplitSpec& spec, int64_t batch_size,
                         int64_t seq_len, uint64_t seed)
    : split_(which), batch_size_(batch_size), seq_len_(seq_len), seed_(seed) {
    // ---- the flags ----
    if (batch_size <= 0) throw UsageError(fmt::format("--micro-batch-size must be positive, got {}", batch_size));
    if (seq_len <= 0) throw UsageError(fmt::format("--seq-length must be positive, got {}", seq_len));
    if (!(spec.val_fraction >= 0.0 && spec.val_fraction < 1.0))  // also rejects NaN
        throw UsageError(fmt::format("--val-fraction must be in [0, 1), got {}", spec.val_fraction));
    if (spec.val_corpus && spec.val_fraction > 0.0)
        throw UsageError(fmt::format("--val-fraction {} and separate validation data '{}' cannot both be given",
                                     spec.val_fraction, spec.val_corpus->source()));
    if (which == Split::val && !spec.val_corpus && spec.val_fraction == 0.0)
        throw UsageError("validation asked for but there is no validation split: give --val-fraction or validation data");

    // ---- the windows of the corpus this split draws from ----
    corpus_ = (which == Split::val && spec.val_corpus) ? spec.val_corpus : &corpus;
    file_first_window_.assign(1, 0);
    for (int i = 0; i < corpus_->num_files(); i++)
        file_first_window_.push_back(file_first_window_.back() +
                                     file_windows(corpus_->file_num_tokens(i), seq_len));
    const int64_t total = file_first_window_.back();
    if (total == 0)
        throw RuntimeError(fmt::format("data '{}': {} tokens make 0 windows of seq-length {}+1{}", corpus_->source(),
                                       corpus_->num_tokens(), seq_len,
                                       corpus_->num_files() > 1 ? " (windows do not cross file boundaries)" : ""));

    // ---- the split ----
    const int64_t held_out = spec.val_corpus ? 0 : val_window_count(total, spec.val_fraction);
    if (which == Split::train) {
        first_window_ = 0;
        num_windows_ = total - held_out;
        if (num_windows_ < batch_size)
            throw RuntimeError(fmt::format(
                "data '{}': {} tokens make {} training windows of seq-length {}+1 ({} of {} held out for validation), "
                "fewer than the batch size {} (--micro-batch-size)",
                corpus_->source(), corpus_->num_tokens(), num_windows_, seq_len, held_out, total, batch_size));
    } else {
        first_window_ = total - (spec.val_corpus ? total : held_out);
        num_windows_ = total - first_window_;
        if (num_windows_ == 0)  // unreachable today (a positive fraction holds out >= 1 window); kept as a guard
            throw RuntimeError(fmt::format("data '{}': the validation split is empty", corpus_->source()));
    }
    if (num_windows_ > int64_t{UINT32_MAX})
        throw RuntimeError(fmt::format("data '{}': {} windows of seq-length {}+1 are more than this loader indexes ({})",
                                       corpus_->source(), num_windows_, seq_len, UINT32_MAX));
    reset();
}

void BatchLoader::shuffle_for_epoch(uint64_t epoch) {
    order_.resize(static_cast<size_t>(num_windows_));
    for (size_t i = 0; i < order_.size(); i++) order_[i] = static_cast<uint32_t>(i);
    // Fisher-Yates with an Rng per epoch: any epoch's order can be rebuilt directly on resume.
    Rng rng(Rng::mix(seed_, "data.train.order") + epoch);
    for (size_t i = order_.size(); i > 1; i--) {
        size_t j = static_cast<size_t>(rng.below(i));
        std::swap(order_[i - 1], order_[j]);
    }
    order_epoch_ = epoch;
}

void BatchLoader::seek(LoaderPosition pos) {
    if (pos.index >= static_cast<uint64_t>(num_windows_))
        throw RuntimeError(fmt::format(
            "data '{}': loader position (epoch {}, window {}) is past the {} {} windows of seq-length {}+1; "
            "was the checkpoint written for other data or another --seq-length?",
            corpus_->source(), pos.epoch, pos.index, num_windows_, split_name(split_), seq_len_));
    if (split_ == Split::train && (order_.empty() || order_epoch_ != pos.epoch)) shuffle_for_epoch(pos.epoch);
    pos_ = pos;
}

LoaderPosition BatchLoader::position_after(int64_t windows) const {
    const auto n = static_cast<uint64_t>(windows), per_epoch = static_cast<uint64_t>(num_windows_);
    return {n / per_epoch, n % per_epoch};
}

int64_t BatchLoader::take_window() {
    const uint64_t i = pos_.index;
    const int64_t within = split_ == Split::train ? static_cast<int64_t>(order_[i]) : static_cast<int64_t>(i);
    if (++pos_.index == static_cast<uint64_t>(num_windows_)) {
        pos_.epoch++;
        pos_.index = 0;
        if (split_ == Split::train) shuffle_for_epoch(pos_.epoch);
    }
    return first_window_ + within;
}

void BatchLoader::copy_window(int64_t window, int32_t* tokens_row, int32_t* targets_row) {
    // The file holding this window: the last file whose first window is <= window.
    auto it = std::upper_bound(file_first_window_.begin(), file_first_window_.end(), window);
    const int file = static_cast<int>(it - file_first_window_.begin()) - 1;
    const int64_t start = (window - file_first_window_[file]) * seq_len_;
    window_tokens_.resize(static_cast<size_t>(seq_len_) + 1);
    corpus_->read_tokens(file, start, seq_len_ + 1, window_tokens_.data());
    const uint16_t* src = window_tokens_.data();
    for (int64_t t = 0; t < seq_len_; t++) {
        tokens_row[t] = src[t];
        targets_row[t] = src[t + 1];
    }
}

void BatchLoader::next(Tensor& tokens, Tensor& targets) {
    const int64_t n = batch_size_ * seq_len_;
    for (Tensor* t : {&tokens, &targets}) {
        if (!t->defined()) *t = Tensor::zeros({n}, DType::i32);
        if (t->dtype() != DType::i32 || t->numel() != n)
            throw std::invalid_argument(fmt::format("BatchLoader::next: expected {} i32 elements, got {} {}", n,
                                                    shape_string(t->shape()), dtype_name(t->dtype())));
    }
    int32_t* tok = tokens.i32();
    int32_t* tgt = targets.i32();
    for (int64_t b = 0; b < batch_size_; b++) copy_window(take_window(), tok + b * seq_len_, tgt + b * seq_len_);
}

std::string BatchLoader::describe() const {
    return fmt::format("{}: {} windows of {}+1 tokens from {}", split_name(split_), num_windows_, seq_len_,
                       corpus_->describe());
}

}  // namespace nb

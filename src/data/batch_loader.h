// BatchLoader: training and evaluation batches cut from a TokenCorpus.
//
// Windows: each file is cut into windows of seq_len + 1 tokens with stride seq_len; window k of a file covers
// its tokens [k*T, k*T + T] (inputs are the first T, targets the last T). Windows never cross a file boundary
// and a file's tail shorter than T + 1 is dropped. Windows are numbered across the corpus in file order.
//
// Split: either the last ceil(val_fraction * windows) windows of the corpus are validation and the rest are
// training, or a separate validation corpus supplies all validation windows (and the corpus is all training).
//
// Order: training visits a fresh permutation of its windows each epoch (our own Fisher-Yates over our own Rng,
// seeded from the seed and the epoch number, so the order is the same on every machine); when an epoch runs
// out the next begins, and one batch may span two epochs. Validation reads its windows in order from the start
// and wraps; reset() goes back to the start so every evaluation sees the same batches.
//
// Position: (epoch, index of the next window in that epoch's order); a checkpoint stores it and seek() resumes.
//
// The loader keeps a pointer to its corpus: the corpus must outlive the loader.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/data/token_files.h"
#include "src/core/tensor.h"

namespace nb {

enum class Split : uint8_t { train, val };

struct SplitSpec {
    // 0 <= val_fraction < 1: the last ceil(val_fraction * windows) windows of the corpus are validation.
    double val_fraction = 0.0;
    // Or a separate validation corpus (then val_fraction must be 0). Must outlive the loader.
    const TokenCorpus* val_corpus = nullptr;
};

struct LoaderPosition {
    uint64_t epoch = 0;
    uint64_t index = 0;  // the next window within this epoch's order, always < num_windows()
    bool operator==(const LoaderPosition&) const = default;
};

// Windows of seq_len + 1 tokens that the corpus makes (summed over its files).
int64_t count_windows(const TokenCorpus& corpus, int64_t seq_len);

// How many of total_windows go to validation: ceil(val_fraction * total_windows), where a product within
// rounding error of an integer counts as that integer (0.7 * 10 is 7.000000000000001 in doubles, and must be 7).
int64_t val_window_count(int64_t total_windows, double val_fraction);

class BatchLoader {
public:
    // Throws UsageError for impossible flags (batch_size or seq_len <= 0, named --micro-batch-size and
    // --seq-length as the trainer calls them; val_fraction outside [0, 1); both a fraction and a validation
    // corpus; validation asked for but not configured) and RuntimeError when the data is too small for them
    // (no windows, fewer training windows than batch_size). Validation may hold fewer windows than a batch: it wraps.
    BatchLoader(const TokenCorpus& corpus, Split which, const SplitSpec& spec, int64_t batch_size, int64_t seq_len,
                uint64_t seed);

    // Fills the next batch. tokens and targets are i32 tensors of batch_size * seq_len elements, row-major
    // [b][t]: tokens[b*T + t] = window_b[t], targets[b*T + t] = window_b[t + 1]. An undefined tensor is
    // allocated with shape [batch_size * seq_len]; a defined one must have that many i32 elements.
    void next(Tensor& tokens, Tensor& targets);

    LoaderPosition position() const { return pos_; }
    // Resume at a position from position(). RuntimeError if it does not fit this data (index past the end).
    void seek(LoaderPosition pos);
    // Back to epoch 0, index 0.
    void reset() { seek(LoaderPosition{}); }
    // Where a loader that started at epoch 0, index 0 stands after handing out `windows` windows: every window
    // advances the index by one and each epoch has num_windows() of them (a pipeline stage that has read ahead
    // names the position of the microbatch a checkpoint resumes at with this).
    LoaderPosition position_after(int64_t windows) const;

    int64_t num_windows() const { return num_windows_; }
    int64_t batch_size() const { return batch_size_; }
    int64_t seq_len() const { return seq_len_; }
    Split split() const { return split_; }

    // One line for the progress log, e.g. "train: 900 windows of 64+1 tokens from text file 'x' (...)".
    std::string describe() const;

private:
    int64_t take_window();                      // the next window (corpus-wide number), advancing pos_
    void shuffle_for_epoch(uint64_t epoch);     // train only: fills order_ for that epoch
    void copy_window(int64_t window, int32_t* tokens_row, int32_t* targets_row);

    const TokenCorpus* corpus_ = nullptr;  // the corpus this split draws from
    Split split_ = Split::train;
    int64_t batch_size_ = 0;
    int64_t seq_len_ = 0;
    uint64_t seed_ = 0;

    std::vector<int64_t> file_first_window_;  // corpus-wide number of each file's first window; back() = total
    int64_t first_window_ = 0;                // this split covers windows [first_window_, first_window_ + num_windows_)
    int64_t num_windows_ = 0;

    std::vector<uint16_t> window_tokens_;  // the window being copied, as read from its file
    std::vector<uint32_t> order_;  // train: this epoch's permutation of [0, num_windows_)
    uint64_t order_epoch_ = 0;     // the epoch order_ was shuffled for
    LoaderPosition pos_;
};

}  // namespace nb

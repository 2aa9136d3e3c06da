// What every training loop reads: the training and validation loaders, the microbatches cut from them, and the
// validation loss. Shared by `train` (src/run/trainer.cpp) and the pipeline oracle (src/run/reference.cpp), so that
// both consume exactly the same data in the same order: microbatch i of iteration t is the (t*m + i)-th batch of
// one training BatchLoader seeded with --seed.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

#include "src/data/batch_loader.h"
#include "model/layer.h"
#include "src/plan/train_options.h"

namespace nb {

// The corpora (which the loaders point into) and their loaders. `val` is null when there is nothing to validate
// on (--val-fraction 0 without --val-data, or --eval-iters 0).
struct TrainData {
    TokenCorpus corpus;
    std::optional<TokenCorpus> val_corpus;
    std::unique_ptr<BatchLoader> train, val;
};

// Opens --data (and --val-data) and checks every token id fits the model's vocabulary (RuntimeError naming the
// file otherwise). Heap-allocated because the loaders keep pointers to the corpora.
std::unique_ptr<TrainData> open_train_data(const TrainOptions& options);

// Host buffers the loader fills; next() hands the layers a microbatch on the backend's device.
class MicrobatchReader {
public:
    explicit MicrobatchReader(const TrainOptions& options);
    Microbatch next(BatchLoader& loader, Device device);

private:
    Microbatch host_;
};

// Validation after iteration `iteration` (0-based): at the last one, and every --eval-interval iterations.
bool evaluation_due(const TrainOptions& options, int64_t iteration);

// Mean of `loss_of` over the first eval_iters x (D x num_microbatches) validation microbatches: eval_iters global
// batches (the same ones every time: the loader is reset first).
double validation_loss(BatchLoader& val, const TrainOptions& options, Device device,
                       const std::function<float(const Microbatch&)>& loss_of);

}  // namespace nb

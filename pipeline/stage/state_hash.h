// The fingerprints that say a pipeline run ended where its oracle ended (docs/DESIGN.md section 2, "The oracle":
// weights AND optimizer state bitwise equal), shared by `nobubble reference` (src/run/reference.h) and the pipeline's
// stage 0 (src/run/progress_collector.h) so that both hash the same bytes in the same order:
//   final weights sha256           every stage's master weights: stage 0's in layout order, then stage 1's, ...
//                                  (for an untied model, the whole model's layout order: model/weights_hash.h;
//                                  tied across stages, the last stage's copy of the matrix is checked equal to
//                                  the first stage's and left out, so that it is the one-stage model's too)
//   final optimizer state sha256   every stage's optimizer state: stage 0's state tensors in the optimizer's
//                                  order (optim/stage_optimizer.h: the optimizer's state tensors, e.g. AdamW's
//                                  exp_avg of each parameter in layout order, then exp_avg_sq; then the delay
//                                  fix's, e.g. ef's previous update), then stage 1's, ...
// Each tensor is hashed as little-endian f32, whatever device it lives on.
#pragma once

#include <string>
#include <vector>

#include "model/params.h"
#include "src/core/tensor.h"

namespace nb {

// SHA-256 over every stage's tensors, stage by stage, each stage's in the order given (copied to the host first).
std::string stages_sha256(const std::vector<std::vector<Tensor>>& per_stage);

// The final weights' fingerprint: stages_sha256, and with `tied` (tied embeddings, more than one stage) the last
// stage's copy of the matrix (its tensor 0) must equal the first stage's bit for bit (std::logic_error naming both
// hashes otherwise: the copies drifted) and is left out.
std::string stages_weights_sha256(std::vector<std::vector<Tensor>> per_stage, bool tied);

}  // namespace nb

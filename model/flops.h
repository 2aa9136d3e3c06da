// Model FLOPs per trained token (forward + backward), the numerator of model-FLOP utilisation.
//
//   6 * N_matmul + 12 * L * T * d
//
// N_matmul counts the parameters used in matrix products (every block matrix and the LM head; not the
// embedding lookup, not norm gains); 12 L T d is attention's QK^T and PV over the full T x T square, forward
// and backward (the PaLM paper's convention; causal masking is not subtracted).
#pragma once

#include "model/config.h"

namespace nb {

double model_flops_per_token(const ModelConfig& config, int64_t seq_len);

}  // namespace nb

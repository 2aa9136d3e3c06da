// What one token computes: the model FLOPs per token (the numerator of model-FLOP utilisation) and the active
// parameters, whole model or one pipeline stage's share.
//
//   forward = 2 N_active + 4 L T d        forward + backward = 3 x forward = 6 N_active + 12 L T d
//
// N_active counts the parameters used in matrix products that a token passes through: every block's attention
// (wq, wk, wv, wo), a dense block's SwiGLU, an MoE block's router (E x d), its k routed experts (the other E - k
// see nothing of this token) and its shared expert, and the LM head; not the embedding lookup, not norm gains, not
// the router's softmax and top-k, the permutation or the combine (O(E + k d) per token, like the norms). 4 L T d
// is attention's QK^T and PV over the full T x T square in the forward, twice that in the backward (the PaLM
// paper's convention; causal masking is not subtracted). A dense model's N_active is all of its matrices.
#pragma once

#include <cstdint>

#include "model/config.h"
#include "model/stage_model.h"

namespace nb {

struct TokenFlops {
    double forward = 0;
    double training() const { return 3 * forward; }  // forward + backward (the backward is two products per one)
};

// The blocks, and the head when it holds it, of stage `spec` (the embedding computes none) per token.
TokenFlops stage_flops_per_token(const ModelConfig& config, const StageSpec& spec, int64_t seq_len);
// The whole model's forward + backward per trained token: what train and bench divide by for MFU.
double model_flops_per_token(const ModelConfig& config, int64_t seq_len);

// Parameters one token's forward uses on stage `spec`: all it holds but, in each MoE block, the E - k routed
// experts the token does not reach. The embedding matrix counts whole (as DeepSeek's "activated parameters" do);
// a dense stage's active count is its parameter count.
int64_t stage_active_param_count(const ModelConfig& config, const StageSpec& spec);

}  // namespace nb

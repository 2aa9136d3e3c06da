// The shape contracts of the layer ops (src/ops/ops.h, LayerOps), one check per op, shared by both backends so
// that the same shapes are legal on either and a bad one gets the same message: std::invalid_argument naming the
// op and the shapes it got. Each backend calls the check of its op first, then adds its own (dtypes, device,
// kernel limits). The checks read shapes only, never data.
#pragma once

#include <cstdint>

#include "src/core/tensor.h"

namespace nb {

// ---- linear: x[.., in], w[out, in], y/dy[.., out] with the same number of rows ----
struct LinearDims {
    int64_t n, in, out;
};
LinearDims check_linear_forward(const Tensor& y, const Tensor& x, const Tensor& w);
// Also dx (when defined) holds as many elements as x, and dw (when defined) is shaped like w.
LinearDims check_linear_backward(const Tensor& dx, const Tensor& dw, const Tensor& dy, const Tensor& x,
                                 const Tensor& w);

// ---- embedding: tokens N ids (any shape), table [V, d], out/dout [.., d] with N rows ----
void check_embedding_forward(const Tensor& out, const Tensor& tokens, const Tensor& table);
void check_embedding_backward(const Tensor& dtable, const Tensor& tokens, const Tensor& dout);

// ---- RMSNorm: x [.., d] read as N rows, gain [d], y/dy like x, rstd N values; each returns N ----
int64_t check_rmsnorm_forward(const Tensor& y, const Tensor& rstd, const Tensor& x, const Tensor& gain);
// Also dx holds as many elements as x and dgain as many as gain.
int64_t check_rmsnorm_backward(const Tensor& dx, const Tensor& dgain, const Tensor& dy, const Tensor& x,
                               const Tensor& gain, const Tensor& rstd);

// ---- RoPE: x and out [N, heads, head_dim] with even head_dim and N a multiple of seq_len > 0 ----
void check_rope_forward(const Tensor& out, const Tensor& x, int64_t seq_len);
void check_rope_backward(const Tensor& din, const Tensor& dout, int64_t seq_len);

// ---- attention: q/out [B,T,H,hd], k/v [B,T,KV,hd] with H % KV == 0 and hd > 0, lse [B,H,T] ----
void check_attention_forward(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k,
                             const Tensor& v);
// Also dout and dq are shaped like q, dk like k and dv like v.
void check_attention_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout,
                              const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse);

// ---- SwiGLU: gate, up, out (and the gradients) of one shape ----
void check_swiglu_forward(const Tensor& out, const Tensor& gate, const Tensor& up);
void check_swiglu_backward(const Tensor& dgate, const Tensor& dup, const Tensor& dout, const Tensor& gate,
                           const Tensor& up);

// ---- cross-entropy: logits [.., V] with V > 0 read as N rows, targets N ids, loss and lse N values; each
// returns N ----
int64_t check_cross_entropy_forward(const Tensor& loss, const Tensor& lse, const Tensor& logits,
                                    const Tensor& targets);
// Also dlogits is shaped like logits.
int64_t check_cross_entropy_backward(const Tensor& dlogits, const Tensor& logits, const Tensor& lse,
                                     const Tensor& targets);

}  // namespace nb

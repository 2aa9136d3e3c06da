// The shape contracts of the layer ops (src/ops/ops.h, LayerOps), one check per op, shared by both backends so
// that the same shapes are legal on either and a bad one gets the same message: std::invalid_argument naming the
// op and the shapes it got. Each backend calls the check of its op first, then adds its own (dtypes, device,
// kernel limits). The checks read shapes only, never data.
#pragma once

#include <cstdint>
#include <vector>

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

// ---- decoding: rope_forward_at's x/out as rope's with first_position >= 0; attention_forward_cached's q/out
// [B,Tq,H,hd], k/v [B,Tk,KV,hd] with Tk >= Tq and H % KV == 0 ----
void check_rope_forward_at(const Tensor& out, const Tensor& x, int64_t first_position);
void check_attention_forward_cached(const Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v);

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

// ---- MoE (src/ops/moe_checks.cpp): N tokens, E experts, k slots, R = N k pairs, d features ----
struct MoeRouterDims {
    int64_t n, e, k;
};
// logits/probs [N,E] with E > 0, topk_expert/topk_gate [N,k] with 1 <= k <= E, expert_bias undefined or [E].
MoeRouterDims check_moe_router_forward(const Tensor& probs, const Tensor& topk_expert, const Tensor& topk_gate,
                                       const Tensor& logits, const Tensor& expert_bias);
// Also dlogits is shaped like probs, dprobs is undefined or shaped like probs, dgate like topk_gate.
MoeRouterDims check_moe_router_backward(const Tensor& dlogits, const Tensor& dprobs, const Tensor& dgate,
                                        const Tensor& probs, const Tensor& topk_expert, const Tensor& topk_gate);
// loss holds 1 value, probs/dprobs [N,E], expert_offsets [E+1]; each returns {N, E, 0}.
MoeRouterDims check_moe_aux_loss_forward(const Tensor& loss, const Tensor& probs, const Tensor& expert_offsets);
MoeRouterDims check_moe_aux_loss_backward(const Tensor& dprobs, const Tensor& expert_offsets);
// topk_expert [N,k], pair_of_row/row_of_pair [N k], expert_offsets [E+1] with E >= k.
MoeRouterDims check_moe_dispatch_plan(const Tensor& pair_of_row, const Tensor& row_of_pair,
                                      const Tensor& expert_offsets, const Tensor& topk_expert);
struct MoeRowDims {
    int64_t n, k, d;
};
// x/dx [N,d], xp/dxp [R,d], the map [R] with R a multiple of N (N = 0 only with R = 0).
MoeRowDims check_moe_permute_forward(const Tensor& xp, const Tensor& x, const Tensor& pair_of_row);
MoeRowDims check_moe_permute_backward(const Tensor& dx, const Tensor& dxp, const Tensor& row_of_pair);
// y/dy [N,d], expert_out [N k, d], topk_gate/dgate [N,k], row_of_pair [N k].
MoeRowDims check_moe_combine_forward(const Tensor& y, const Tensor& expert_out, const Tensor& topk_gate,
                                     const Tensor& row_of_pair);
MoeRowDims check_moe_combine_backward(const Tensor& dexpert_out, const Tensor& dgate, const Tensor& dy,
                                      const Tensor& expert_out, const Tensor& topk_gate, const Tensor& row_of_pair);
// x [R,in], y [R,out], E = expert_offsets.numel() - 1 weights, each [out,in]; returns {R, in, out}.
LinearDims check_moe_grouped_linear_forward(const Tensor& y, const Tensor& x, const std::vector<const Tensor*>& w,
                                            const Tensor& expert_offsets);
// Also dx is undefined or shaped like x, dw holds E gradients, each shaped like its weight.
LinearDims check_moe_grouped_linear_backward(const Tensor& dx, const std::vector<Tensor*>& dw, const Tensor& dy,
                                             const Tensor& x, const std::vector<const Tensor*>& w,
                                             const Tensor& expert_offsets);
// The one check on data, not shapes: the offsets (a host copy of them) partition the R rows,
// 0 = off[0] <= off[1] <= ... <= off[E] = R; std::invalid_argument naming `op` otherwise.
void check_moe_offsets_partition(const char* op, const int32_t* host_offsets, int64_t experts, int64_t rows);
// expert_load [E] f32 and expert_offsets [E+1]; returns E.
int64_t check_moe_expert_load_accumulate(const Tensor& expert_load, const Tensor& expert_offsets);
// expert_bias and expert_load f32 [E] with E > 0; returns E.
int64_t check_moe_expert_bias_update(const Tensor& expert_bias, const Tensor& expert_load);

}  // namespace nb

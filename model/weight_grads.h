// The weight half of a backward, apart from its input half (zero-bubble schedules run the two at different times).
//
// A layer's backward is written once (Layer::backward_pass, model/layer.h). Every op of it that adds to a
// parameter's gradient goes through WeightGrads, which runs the op's input half (dx) at once and hands on the
// product that the input gradient does not need:
//
//   linear         dW[o, i]    += sum_n dy[n, o] x[n, i]             linear_backward with dx undefined
//   rmsnorm_gain   dgain[j]    += sum_n dy[n, j] x[n, j] rstd[n]     rmsnorm_backward with dx undefined
//   embedding      dtable[t_n] += dout[n]                             embedding_backward
//   grouped_linear dW_e        += dy_e^T x_e for each expert e         moe_grouped_linear_backward with dx undefined
//   expert_load    load[e]     += the pairs expert e received          moe_expert_load_accumulate
//
// WeightGrads either runs each product at once (the fused backward: the op order of a plain backward) or
// records it, with the tensors it reads, into a list that backward_weight runs later, in the order recorded.
// Why the two give the same bits: each product adds into one parameter's gradient slot only, and every tensor a
// record reads is final when it is recorded (the backward writes nothing in place after that). Within one
// microbatch each slot gets one product, except a tied embedding on a one-stage model (the head's, then the
// embedding's: the weight halves run in the same reverse layer order as the fused backward). Across microbatches
// the schedule runs the weight halves in microbatch order. tests/unit/test_split_backward.cpp checks every layer.
#pragma once

#include <cstddef>
#include <vector>

#include "src/core/tensor.h"
#include "src/ops/ops.h"

namespace nb {

struct TensorSet;  // model/params.h

// One deferred weight-gradient product: what it computes and the tensors it reads (held until it runs).
struct WeightGradOp {
    enum class Kind { linear, rmsnorm_gain, embedding, grouped_linear, expert_load };
    Kind kind;
    std::vector<int> params;  // the gradient slots it adds to (grouped_linear: one per expert; else one)
    Tensor dy;                // d objective / d the layer's output (expert_load: unused)
    Tensor x;                 // what dy is multiplied by (embedding: the token ids; expert_load: unused)
    Tensor aux;               // rmsnorm_gain: rstd; grouped_linear, expert_load: the expert offsets
};

// Runs one product: adds into grads[op.params...]. `weights` gives the shapes the ops check (their values are not
// read by any product above).
void run_weight_grad(Ops& ops, const TensorSet& weights, TensorSet& grads, const WeightGradOp& op);

// Bytes of the distinct buffers the records read (views of one buffer counted once): what a stash still holds
// for its weight half.
size_t held_bytes(const std::vector<WeightGradOp>& ops);

// A layer's backward calls one of these per op: the input half (dx += ...) runs now, the weight half goes to the
// sink (at once, or recorded), so that the two halves of one op are always given the same tensors.
class WeightGrads {
public:
    // `deferred` null: each product runs at once, into grads. Otherwise each is appended to *deferred.
    WeightGrads(Ops& ops, const TensorSet& weights, TensorSet& grads, std::vector<WeightGradOp>* deferred)
        : ops_(ops), weights_(weights), grads_(grads), deferred_(deferred) {}

    // dx += dy W, then dW += dy^T x (W = weights[param]).
    void linear_backward(Tensor& dx, int param, const Tensor& dy, const Tensor& x);
    // dx += the norm's input gradient, then dgain += sum_n dy x rstd (gain = weights[param]).
    void rmsnorm_backward(Tensor& dx, int param, const Tensor& dy, const Tensor& x, const Tensor& rstd);
    // Per expert: dx += dy W_e, then dW_e += dy_e^T x_e (W_e = weights[params[e]]).
    void grouped_linear_backward(Tensor& dx, std::vector<int> params, const Tensor& dy, const Tensor& x,
                                 const Tensor& expert_offsets);
    // Weight halves only (nothing upstream needs an input gradient from them).
    void embedding(int param, const Tensor& tokens, const Tensor& dout);
    void expert_load(int param, const Tensor& expert_offsets);

private:
    void add(WeightGradOp op);

    Ops& ops_;
    const TensorSet& weights_;
    TensorSet& grads_;
    std::vector<WeightGradOp>* deferred_;
};

}  // namespace nb

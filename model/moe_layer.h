// MoeFeedForward: the Mixture-of-Experts feed-forward that replaces a block's SwiGLU MLP (docs/DESIGN.md section 7).
// It reads h = rmsnorm(x1) * g_mlp, one row per token, and returns what the block adds to its residual stream:
//
//   logits = h W_r^T ; p = softmax(logits) ; the k experts with the largest p + b (b: the expert bias) ; gates
//   y[n] = sum over slots j in order of gate[n,j] SwiGLU_{e_j}(h[n]) + SharedExpert(h[n])
//   SwiGLU_e(h) = (silu(h W_gate,e^T) * (h W_up,e^T)) W_down,e^T
//   L_aux = coeff E sum_i f_i P_i           (Switch/GShard; added to the microbatch's loss by the caller)
//
// Dropless: the (token, slot) pairs are permuted into expert order, each projection is one grouped GEMM over the
// experts' contiguous rows, and the outputs are combined back in slot order. Everything goes through ops.
//
// Parameters, in canonical order, under `prefix` (e.g. "layers.3.moe"):
//   router.weight [E,d]; experts.<e>.w_gate [f,d], experts.<e>.w_up [f,d], experts.<e>.w_down [d,f] for each e
//   (separate matrices, so Muon orthogonalises each expert's own); shared_expert.w_gate/w_up/w_down when the
//   shared expert's size is > 0; last, with --moe-router-enable-expert-bias, expert_bias [E].
// The expert bias is a buffer (ParamKind::expert_bias, model/params.h), not a parameter: zero at the start, it
// lives in the weights (so a forward at version v selects with version v's bias, and it is checkpointed with
// them), and its gradient slot holds the loads instead of a gradient: backward adds each microbatch's pairs per
// expert to it (backwards never interleave across steps, so the slot sums exactly the step's microbatches), and
// StageOptimizer applies b_i += rate sign(mean_load - load_i) after the optimizer's update (optim/stage_optimizer.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/layer.h"
#include "model/moe_config.h"

namespace nb {

struct MoeOutput {
    Tensor out;             // [N, d], activation dtype
    Tensor aux_loss;        // f32 [1] on the backend's device: this microbatch's L_aux (coeff included)
    Tensor expert_offsets;  // i32 [E+1] on the device: expert e received offsets[e+1] - offsets[e] pairs
};

// What MoeFeedForward's forward keeps for its backward (R = N k pairs; the shared expert's three only with it).
struct MoeSaved final : SavedTensors {
    Tensor h;                          // [N, d] the input
    Tensor probs;                      // f32 [N, E] the router's softmax
    Tensor topk_expert, topk_gate;     // i32, f32 [N, k]
    Tensor pair_of_row, row_of_pair;   // i32 [R] the permutation both ways
    Tensor offsets;                    // i32 [E+1] the expert offsets
    Tensor xp;                         // [R, d] the permuted input
    Tensor gate, up, act;              // [R, f] the experts' SwiGLU
    Tensor expert_out;                 // [R, d]
    Tensor shared_gate, shared_up, shared_act;  // [N, fs]
    size_t bytes() const override {
        return defined_bytes(h, probs, topk_expert, topk_gate, pair_of_row, row_of_pair, offsets, xp, gate, up, act,
                             expert_out, shared_gate, shared_up, shared_act);
    }
};

class MoeFeedForward {
public:
    MoeFeedForward(int64_t hidden_size, const MoeConfig& config, const std::string& prefix, ParamLayout& layout);

    // expert_bias: f32 [E] on the device, or undefined (no bias): expert_bias(ctx.weights). With `saved`, fills
    // what backward needs.
    MoeOutput forward(const LayerContext& ctx, const Tensor& h, const Tensor& expert_bias, MoeSaved* saved) const;
    // dout = d objective / d out; daux_loss = d objective / d L_aux (1 for one microbatch). Reads `saved`, hands
    // the parameter gradients (and, with the expert bias, the microbatch's loads) to `wg` (model/weight_grads.h:
    // at once or deferred), and returns d objective / d h.
    Tensor backward(const LayerContext& ctx, const Tensor& dout, float daux_loss, const MoeSaved& saved,
                    WeightGrads& wg) const;
    // The same with every weight product run at once (a plain backward).
    Tensor backward(const LayerContext& ctx, const Tensor& dout, float daux_loss, const MoeSaved& saved) const;

    // The bias of `weights` (its expert_bias tensor), or an undefined tensor without --moe-router-enable-expert-bias.
    Tensor expert_bias(const TensorSet& weights) const { return bias_ < 0 ? Tensor{} : weights[bias_]; }

    const MoeConfig& config() const { return c_; }

private:
    struct SwiGluParams {
        int w_gate = -1, w_up = -1, w_down = -1;
    };
    int64_t d_;
    MoeConfig c_;
    int router_ = -1;
    int bias_ = -1;  // the expert_bias buffer, -1 without it
    std::vector<SwiGluParams> experts_;
    SwiGluParams shared_;

    std::vector<const Tensor*> expert_weights(const TensorSet& set, int SwiGluParams::*which) const;
    std::vector<int> expert_params(int SwiGluParams::*which) const;
};

}  // namespace nb

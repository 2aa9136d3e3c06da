// MoeFeedForward's forward and backward, written as ops (the math of each is beside its kernel, src/cpu/moe_*.cpp).
//
// Forward, N tokens, k slots, R = N k pairs:
//   logits[N,E] = h W_r^T                                   linear_forward
//   probs, topk_expert, topk_gate                           moe_router_forward (bias selects, gates use p)
//   pair_of_row, row_of_pair, expert_offsets                moe_dispatch_plan  (stable, by expert then token)
//   xp[R,d] = h[token of each row]                          moe_permute_forward
//   gate, up [R,f] = xp W_gate,e^T, xp W_up,e^T per expert  moe_grouped_linear_forward
//   act = silu(gate) * up ; eout[R,d] = act W_down,e^T      swiglu_forward, moe_grouped_linear_forward
//   out[N,d] = sum_j topk_gate[n,j] eout[row of (n,j)]      moe_combine_forward (slot order)
//   out += shared(h)                                        the shared expert, a plain SwiGLU, added last
//   aux_loss = coeff E sum_i f_i P_i                        moe_aux_loss_forward
// Backward runs the same list in reverse; d h collects, in this order, the shared expert's part, the routed
// experts' part (through the permutation) and the router's part.
#include "model/moe_layer.h"

#include <fmt/format.h>

namespace nb {

MoeFeedForward::MoeFeedForward(int64_t hidden_size, const MoeConfig& config, const std::string& prefix,
                               ParamLayout& layout)
    : d_(hidden_size), c_(config) {
    c_.validate();
    auto name = [&prefix](const std::string& leaf) { return fmt::format("{}.{}", prefix, leaf); };
    const int64_t d = d_, f = c_.ffn_hidden_size, fs = c_.shared_ffn_hidden_size;
    // The router is a hidden matrix like any other (Muon orthogonalises it; docs/DESIGN.md section 7 says why).
    router_ = layout.add({name("router.weight"), {c_.num_experts, d}, ParamKind::hidden_matrix});
    for (int64_t e = 0; e < c_.num_experts; ++e) {
        SwiGluParams p;
        p.w_gate = layout.add({name(fmt::format("experts.{}.w_gate", e)), {f, d}, ParamKind::hidden_matrix});
        p.w_up = layout.add({name(fmt::format("experts.{}.w_up", e)), {f, d}, ParamKind::hidden_matrix});
        p.w_down = layout.add({name(fmt::format("experts.{}.w_down", e)), {d, f}, ParamKind::hidden_matrix});
        experts_.push_back(p);
    }
    if (c_.has_shared_expert()) {
        shared_.w_gate = layout.add({name("shared_expert.w_gate"), {fs, d}, ParamKind::hidden_matrix});
        shared_.w_up = layout.add({name("shared_expert.w_up"), {fs, d}, ParamKind::hidden_matrix});
        shared_.w_down = layout.add({name("shared_expert.w_down"), {d, fs}, ParamKind::hidden_matrix});
    }
    if (c_.expert_bias) bias_ = layout.add({name("expert_bias"), {c_.num_experts}, ParamKind::expert_bias});
}

std::vector<const Tensor*> MoeFeedForward::expert_weights(const TensorSet& set, int SwiGluParams::*which) const {
    std::vector<const Tensor*> out;
    for (const SwiGluParams& p : experts_) out.push_back(&set[p.*which]);
    return out;
}

std::vector<int> MoeFeedForward::expert_params(int SwiGluParams::*which) const {
    std::vector<int> out;
    for (const SwiGluParams& p : experts_) out.push_back(p.*which);
    return out;
}

MoeOutput MoeFeedForward::forward(const LayerContext& ctx, const Tensor& h, const Tensor& expert_bias,
                                  MoeSaved* saved) const {
    Ops& ops = ctx.ops;
    const TensorSet& w = ctx.weights;
    const int64_t N = h.numel() / d_, d = d_, E = c_.num_experts, k = c_.topk, R = N * k;
    const int64_t f = c_.ffn_hidden_size, fs = c_.shared_ffn_hidden_size;
    const Tensor h2 = h.reshaped({N, d});

    Tensor logits = ops.output({N, E});
    ops.linear_forward(logits, h2, w[router_]);
    Tensor probs = ops.f32_output({N, E}), topk_gate = ops.f32_output({N, k});
    Tensor topk_expert = ops.empty({N, k}, DType::i32);
    ops.moe_router_forward(probs, topk_expert, topk_gate, logits, expert_bias, c_.topk_renorm);

    Tensor pair_of_row = ops.empty({R}, DType::i32), row_of_pair = ops.empty({R}, DType::i32);
    Tensor offsets = ops.empty({E + 1}, DType::i32);
    ops.moe_dispatch_plan(pair_of_row, row_of_pair, offsets, topk_expert);
    Tensor xp = ops.output({R, d});
    ops.moe_permute_forward(xp, h2, pair_of_row);

    Tensor gate = ops.output({R, f}), up = ops.output({R, f}), act = ops.output({R, f});
    ops.moe_grouped_linear_forward(gate, xp, expert_weights(w, &SwiGluParams::w_gate), offsets);
    ops.moe_grouped_linear_forward(up, xp, expert_weights(w, &SwiGluParams::w_up), offsets);
    ops.swiglu_forward(act, gate, up);
    Tensor expert_out = ops.output({R, d});
    ops.moe_grouped_linear_forward(expert_out, act, expert_weights(w, &SwiGluParams::w_down), offsets);

    MoeOutput result;
    result.out = ops.output({N, d});
    ops.moe_combine_forward(result.out, expert_out, topk_gate, row_of_pair);

    Tensor s_gate, s_up, s_act;
    if (c_.has_shared_expert()) {
        s_gate = ops.output({N, fs});
        s_up = ops.output({N, fs});
        s_act = ops.output({N, fs});
        ops.linear_forward(s_gate, h2, w[shared_.w_gate]);
        ops.linear_forward(s_up, h2, w[shared_.w_up]);
        ops.swiglu_forward(s_act, s_gate, s_up);
        Tensor s_out = ops.output({N, d});
        ops.linear_forward(s_out, s_act, w[shared_.w_down]);
        ops.add_inplace(result.out, s_out);
    }

    result.aux_loss = ops.f32_output({1});
    ops.moe_aux_loss_forward(result.aux_loss, probs, offsets, static_cast<float>(c_.aux_loss_coeff));
    result.expert_offsets = offsets;

    if (saved) {
        *saved = MoeSaved{};
        saved->h = h2;
        saved->probs = probs;
        saved->topk_expert = topk_expert;
        saved->topk_gate = topk_gate;
        saved->pair_of_row = pair_of_row;
        saved->row_of_pair = row_of_pair;
        saved->offsets = offsets;
        saved->xp = xp;
        saved->gate = gate;
        saved->up = up;
        saved->act = act;
        saved->expert_out = expert_out;
        saved->shared_gate = s_gate;
        saved->shared_up = s_up;
        saved->shared_act = s_act;
    }
    return result;
}

Tensor MoeFeedForward::backward(const LayerContext& ctx, const Tensor& dout, float daux_loss,
                                const MoeSaved& saved) const {
    WeightGrads now(ctx.ops, ctx.weights, *ctx.grads, nullptr);
    return backward(ctx, dout, daux_loss, saved, now);
}

Tensor MoeFeedForward::backward(const LayerContext& ctx, const Tensor& dout, float daux_loss, const MoeSaved& s,
                                WeightGrads& wg) const {
    Ops& ops = ctx.ops;
    const int64_t N = s.h.dim(0), d = d_, E = c_.num_experts, k = c_.topk, R = N * k;
    const int64_t f = c_.ffn_hidden_size, fs = c_.shared_ffn_hidden_size;
    const Tensor dout2 = dout.reshaped({N, d});
    Tensor dh = ops.activation({N, d});

    if (c_.has_shared_expert()) {
        Tensor ds_act = ops.activation({N, fs}), ds_gate = ops.activation({N, fs}), ds_up = ops.activation({N, fs});
        wg.linear_backward(ds_act, shared_.w_down, dout2, s.shared_act);
        ops.swiglu_backward(ds_gate, ds_up, ds_act, s.shared_gate, s.shared_up);
        wg.linear_backward(dh, shared_.w_gate, ds_gate, s.h);
        wg.linear_backward(dh, shared_.w_up, ds_up, s.h);
    }

    // The routed experts, back through the combine, the grouped SwiGLU and the permutation.
    Tensor dexpert_out = ops.activation({R, d}), dtopk_gate = ops.f32_zeros({N, k});
    ops.moe_combine_backward(dexpert_out, dtopk_gate, dout2, s.expert_out, s.topk_gate, s.row_of_pair);
    Tensor dact = ops.activation({R, f});
    wg.grouped_linear_backward(dact, expert_params(&SwiGluParams::w_down), dexpert_out, s.act, s.offsets);
    Tensor dgate = ops.activation({R, f}), dup = ops.activation({R, f});
    ops.swiglu_backward(dgate, dup, dact, s.gate, s.up);
    Tensor dxp = ops.activation({R, d});
    wg.grouped_linear_backward(dxp, expert_params(&SwiGluParams::w_gate), dgate, s.xp, s.offsets);
    wg.grouped_linear_backward(dxp, expert_params(&SwiGluParams::w_up), dup, s.xp, s.offsets);
    ops.moe_permute_backward(dh, dxp, s.row_of_pair);

    // The router: the gates' gradient and the aux loss's, through the softmax, then the router's linear.
    Tensor dprobs;  // undefined: no aux-loss term
    if (c_.aux_loss_coeff != 0.0 && daux_loss != 0.0f) {
        dprobs = ops.f32_zeros({N, E});
        ops.moe_aux_loss_backward(dprobs, s.offsets, static_cast<float>(c_.aux_loss_coeff), daux_loss);
    }
    Tensor dlogits = ops.activation({N, E});
    ops.moe_router_backward(dlogits, dprobs, dtopk_gate, s.probs, s.topk_expert, s.topk_gate, c_.topk_renorm);
    wg.linear_backward(dh, router_, dlogits, s.h);

    // The expert bias's slot sums the step's loads (its update reads them: model/params.h, ParamKind).
    if (bias_ >= 0) wg.expert_load(bias_, s.offsets);
    return dh.reshaped(dout.shape());
}

}  // namespace nb

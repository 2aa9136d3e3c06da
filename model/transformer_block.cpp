// One decoder block (pre-norm, LLaMA style):
//
//   h1 = rmsnorm(x) * g_attn
//   q, k, v = h1 Wq^T, h1 Wk^T, h1 Wv^T          (q: H heads, k/v: KV heads of head_dim each)
//   a  = causal_attention(rope(q), rope(k), v)    (grouped-query: head h reads kv head h / (H/KV))
//   x1 = x + a Wo^T
//   h2 = rmsnorm(x1) * g_mlp
//   x2 = x1 + (silu(h2 Wg^T) * (h2 Wu^T)) Wd^T
//
// In a block that ModelConfig::moe_blocks marks, the MLP is an MoeFeedForward (model/moe_layer.h) under
// "layers.<i>.moe": x2 = x1 + moe(h2). Its aux loss joins the microbatch's objective (d objective / d L_aux = 1,
// as the LM loss's) through backward only; the loss a run reports stays the LM loss. Around the MoE's forward and
// backward the block tells LayerContext::moe, when set, what it routed (model/moe_load.h): the aux loss and the
// expert load reported apart, and the dispatch's span in --trace.
#include <cmath>
#include <memory>
#include <stdexcept>

#include <fmt/format.h>

#include "model/kv_cache.h"
#include "model/layer.h"
#include "model/moe_layer.h"
#include "model/moe_load.h"

namespace nb {

namespace {

// What forward keeps for backward (N = B T rows). A dense block keeps gate, up, act; an MoE block its MoeSaved.
struct BlockSaved final : SavedTensors {
    Tensor x, rstd1, h1;     // the input, the attention norm's 1/rms (f32 [N]) and output [N, d]
    Tensor q, k, v;          // [B, T, H|KV, hd], q and k after rope
    Tensor attn, lse;        // the attention's output [B, T, H, hd] and log-sum-exp (f32 [B, H, T])
    Tensor x1, rstd2, h2;    // the residual after attention, the MLP norm's 1/rms and output
    Tensor gate, up, act;    // the dense MLP's [N, f]
    MoeSaved moe;            // the MoE's (an MoE block's)
    size_t bytes() const override {
        return defined_bytes(x, rstd1, h1, q, k, v, attn, lse, x1, rstd2, h2, gate, up, act) + moe.bytes();
    }
};

struct BlockParams {
    int attn_norm, wq, wk, wv, wo, mlp_norm, w_gate = -1, w_up = -1, w_down = -1;
};

// The dense MLP's matrices are registered only in a dense block; an MoE block's follow mlp_norm (its caller adds).
BlockParams register_block_params(const ModelConfig& c, int64_t i, bool dense_mlp, ParamLayout& layout) {
    auto name = [i](const char* leaf) { return fmt::format("layers.{}.{}", i, leaf); };
    const int64_t d = c.hidden_size, f = c.ffn_hidden_size, kv = c.kv_dim();
    BlockParams p{};
    p.attn_norm = layout.add({name("attn_norm.weight"), {d}, ParamKind::norm_gain});
    p.wq = layout.add({name("attn.wq"), {d, d}, ParamKind::hidden_matrix});
    p.wk = layout.add({name("attn.wk"), {kv, d}, ParamKind::hidden_matrix});
    p.wv = layout.add({name("attn.wv"), {kv, d}, ParamKind::hidden_matrix});
    p.wo = layout.add({name("attn.wo"), {d, d}, ParamKind::hidden_matrix});
    p.mlp_norm = layout.add({name("mlp_norm.weight"), {d}, ParamKind::norm_gain});
    if (!dense_mlp) return p;
    p.w_gate = layout.add({name("mlp.w_gate"), {f, d}, ParamKind::hidden_matrix});
    p.w_up = layout.add({name("mlp.w_up"), {f, d}, ParamKind::hidden_matrix});
    p.w_down = layout.add({name("mlp.w_down"), {d, f}, ParamKind::hidden_matrix});
    return p;
}

class TransformerBlock final : public Layer {
public:
    TransformerBlock(const ModelConfig& config, int64_t index, ParamLayout& layout)
        : c_(config),
          index_(index),
          p_(register_block_params(config, index, !config.is_moe_block(index), layout)),
          moe_(config.is_moe_block(index) ? std::make_unique<MoeFeedForward>(
                                                config.hidden_size, config.moe, fmt::format("layers.{}.moe", index),
                                                layout)
                                          : nullptr) {}

    std::string name() const override { return fmt::format("block.{}", index_); }

    Tensor forward(const LayerContext& ctx, const Tensor& x, Stash* stash) const override {
        Ops& ops = ctx.ops;
        const TensorSet& w = ctx.weights;
        const int64_t B = ctx.batch.batch_size, T = ctx.batch.seq_len, N = B * T;
        const int64_t d = c_.hidden_size, f = c_.ffn_hidden_size, H = c_.num_heads, KV = c_.num_kv_heads;
        const int64_t hd = c_.head_dim();
        const float eps = static_cast<float>(c_.norm_eps), theta = static_cast<float>(c_.rope_theta);

        // Attention half.
        Tensor rstd1 = ops.f32_output({N});
        Tensor h1 = ops.output({N, d});
        ops.rmsnorm_forward(h1, rstd1, x, w[p_.attn_norm], eps);
        Tensor q_lin = ops.output({N, d}), k_lin = ops.output({N, KV * hd}), v = ops.output({N, KV * hd});
        ops.linear_forward(q_lin, h1, w[p_.wq]);
        ops.linear_forward(k_lin, h1, w[p_.wk]);
        ops.linear_forward(v, h1, w[p_.wv]);
        Tensor q = ops.output({B, T, H, hd}), k = ops.output({B, T, KV, hd});
        Tensor q3 = q.reshaped({N, H, hd}), k3 = k.reshaped({N, KV, hd});
        Tensor v4 = v.reshaped({B, T, KV, hd});
        Tensor attn = ops.output({B, T, H, hd}), lse;
        if (ctx.kv_cache) {
            if (stash) throw std::logic_error("a block's forward with a KV cache keeps no stash");
            attend_with_cache(ctx, attn, q3, k3, q_lin, k_lin, v);
        } else {
            ops.rope_forward(q3, q_lin.reshaped({N, H, hd}), T, theta);
            ops.rope_forward(k3, k_lin.reshaped({N, KV, hd}), T, theta);
            lse = ops.f32_output({B, H, T});
            ops.attention_forward(attn, lse, q, k, v4);
        }
        Tensor attn2 = attn.reshaped({N, d});
        Tensor x1 = ops.copy_of(x);
        Tensor proj = ops.output({N, d});
        ops.linear_forward(proj, attn2, w[p_.wo]);
        ops.add_inplace(x1, proj);

        // MLP half.
        Tensor rstd2 = ops.f32_output({N});
        Tensor h2 = ops.output({N, d});
        ops.rmsnorm_forward(h2, rstd2, x1, w[p_.mlp_norm], eps);
        auto saved = stash ? std::make_shared<BlockSaved>() : nullptr;
        const bool selective = stash && stash->selective;  // an MoE block keeps h2 anyway (as the MoE's input)
        if (saved) {
            saved->x = x, saved->rstd1 = rstd1, saved->q = q, saved->k = k, saved->v = v4;
            saved->attn = attn, saved->lse = lse, saved->x1 = x1, saved->rstd2 = rstd2;
            if (!selective) saved->h1 = h1, saved->h2 = h2;
            stash->saved = saved;
        }
        if (moe_) {
            if (ctx.moe) ctx.moe->dispatch_begins(index_, false);
            const MoeOutput m = moe_->forward(ctx, h2, moe_->expert_bias(w), saved ? &saved->moe : nullptr);
            if (ctx.moe) ctx.moe->dispatch_ends(index_, false, m.expert_offsets, m.aux_loss);
            Tensor x2 = ops.copy_of(x1);
            ops.add_inplace(x2, m.out);
            return x2;
        }
        Tensor gate = ops.output({N, f}), up = ops.output({N, f}), act = ops.output({N, f});
        ops.linear_forward(gate, h2, w[p_.w_gate]);
        ops.linear_forward(up, h2, w[p_.w_up]);
        ops.swiglu_forward(act, gate, up);
        Tensor x2 = ops.copy_of(x1);
        Tensor down = ops.output({N, d});
        ops.linear_forward(down, act, w[p_.w_down]);
        ops.add_inplace(x2, down);

        if (saved) saved->gate = gate, saved->up = up, saved->act = selective ? Tensor{} : act;
        return x2;
    }

private:
    // Decoding (model/kv_cache.h): the T new rows (one sequence) at positions L .. L+T-1 after the cache's L; their
    // k and v join the cache, and the queries attend over all L+T keys.
    void attend_with_cache(const LayerContext& ctx, Tensor& attn, Tensor& q3, Tensor& k3, const Tensor& q_lin,
                           const Tensor& k_lin, const Tensor& v) const {
        Ops& ops = ctx.ops;
        KvCache& cache = *ctx.kv_cache;
        const int64_t T = ctx.batch.rows(), L = cache.length(), H = c_.num_heads, KV = c_.num_kv_heads;
        const int64_t hd = c_.head_dim();
        const float theta = static_cast<float>(c_.rope_theta);
        if (ctx.batch.batch_size != 1 || L + T > cache.capacity())
            throw std::invalid_argument(fmt::format("{}: decoding takes one sequence within the cache's {} positions; "
                                                    "got {} x {} tokens after {}",
                                                    name(), cache.capacity(), ctx.batch.batch_size,
                                                    ctx.batch.seq_len, L));
        ops.rope_forward_at(q3, q_lin.reshaped({T, H, hd}), L, theta);
        ops.rope_forward_at(k3, k_lin.reshaped({T, KV, hd}), L, theta);
        Tensor k_new = cache.keys(index_, L, L + T), v_new = cache.values(index_, L, L + T);
        ops.cast(k_new, k3);
        ops.cast(v_new, v.reshaped({T, KV, hd}));
        ops.attention_forward_cached(attn, q3.reshaped({1, T, H, hd}), cache.keys(index_, 0, L + T).reshaped({1, L + T, KV, hd}),
                                     cache.values(index_, 0, L + T).reshaped({1, L + T, KV, hd}));
    }

protected:
    // Each linear and norm through `wg`: its dx now (the input half), its dW or dgain at once or recorded.
    Tensor backward_pass(const LayerContext& ctx, const Tensor& dout, const Stash& stash,
                         WeightGrads& wg) const override {
        Ops& ops = ctx.ops;
        const BlockSaved& s = stash.saved_as<BlockSaved>();
        const int64_t N = ctx.batch.rows();
        const int64_t d = c_.hidden_size, f = c_.ffn_hidden_size;

        // MLP half: x2 = x1 + mlp(x1), so dx1 = dout + d mlp/dx1.
        Tensor dx1 = ops.copy_of(dout);
        Tensor dh2;
        if (moe_) {
            if (ctx.moe) ctx.moe->dispatch_begins(index_, true);
            dh2 = moe_->backward(ctx, dout, 1.0f, s.moe, wg);
            if (ctx.moe) ctx.moe->dispatch_ends(index_, true, s.moe.offsets, Tensor{});
        } else {
            Tensor act = s.act;
            if (!act.defined()) {  // selective: the forward's op again, the same bits
                act = ops.output({N, f});
                ops.swiglu_forward(act, s.gate, s.up);
            }
            const Tensor h2 = kept_or_norm(ctx, s.h2, s.x1, p_.mlp_norm);
            Tensor dact = ops.activation({N, f});
            wg.linear_backward(dact, p_.w_down, dout, act);
            Tensor dgate = ops.activation({N, f}), dup = ops.activation({N, f});
            ops.swiglu_backward(dgate, dup, dact, s.gate, s.up);
            dh2 = ops.activation({N, d});
            wg.linear_backward(dh2, p_.w_gate, dgate, h2);
            wg.linear_backward(dh2, p_.w_up, dup, h2);
        }
        wg.rmsnorm_backward(dx1, p_.mlp_norm, dh2, s.x1, s.rstd2);
        return attention_backward(ctx, dx1, s, wg);
    }

private:
    // A norm's output: `kept`, or under selective recomputation the forward's rmsnorm again on its input `in` with
    // the gain of the backward's weights (the forward's version), the same bits.
    Tensor kept_or_norm(const LayerContext& ctx, const Tensor& kept, const Tensor& in, int gain) const {
        if (kept.defined()) return kept;
        Tensor rstd = ctx.ops.f32_output({in.dim(0)}), h = ctx.ops.output(in.shape());
        ctx.ops.rmsnorm_forward(h, rstd, in, ctx.weights[gain], static_cast<float>(c_.norm_eps));
        return h;
    }

    // Attention half: x1 = x + attn(x), so dx = dx1 + d attn/dx.
    Tensor attention_backward(const LayerContext& ctx, const Tensor& dx1, const BlockSaved& s, WeightGrads& wg) const {
        Ops& ops = ctx.ops;
        const int64_t B = ctx.batch.batch_size, T = ctx.batch.seq_len, N = B * T;
        const int64_t d = c_.hidden_size, H = c_.num_heads, KV = c_.num_kv_heads;
        const int64_t hd = c_.head_dim();
        const float theta = static_cast<float>(c_.rope_theta);
        Tensor dx = ops.copy_of(dx1);
        Tensor dattn = ops.activation({B, T, H, hd});
        Tensor dattn2 = dattn.reshaped({N, d});
        const Tensor attn2 = s.attn.reshaped({N, d});
        wg.linear_backward(dattn2, p_.wo, dx1, attn2);
        Tensor dq = ops.activation({B, T, H, hd}), dk = ops.activation({B, T, KV, hd});
        Tensor dv = ops.activation({B, T, KV, hd});
        ops.attention_backward(dq, dk, dv, dattn, s.q, s.k, s.v, s.attn, s.lse);
        Tensor dq_lin = ops.activation({N, H, hd}), dk_lin = ops.activation({N, KV, hd});
        ops.rope_backward(dq_lin, dq.reshaped({N, H, hd}), T, theta);
        ops.rope_backward(dk_lin, dk.reshaped({N, KV, hd}), T, theta);
        const Tensor h1 = kept_or_norm(ctx, s.h1, s.x, p_.attn_norm);
        Tensor dh1 = ops.activation({N, d});
        const Tensor dq2 = dq_lin.reshaped({N, d}), dk2 = dk_lin.reshaped({N, KV * hd}), dv2 = dv.reshaped({N, KV * hd});
        wg.linear_backward(dh1, p_.wq, dq2, h1);
        wg.linear_backward(dh1, p_.wk, dk2, h1);
        wg.linear_backward(dh1, p_.wv, dv2, h1);
        wg.rmsnorm_backward(dx, p_.attn_norm, dh1, s.x, s.rstd1);
        return dx;
    }

    ModelConfig c_;
    int64_t index_;
    BlockParams p_;
    std::unique_ptr<MoeFeedForward> moe_;  // null in a dense block
};

}  // namespace

std::unique_ptr<Layer> make_transformer_block(const ModelConfig& config, int64_t block_index, ParamLayout& layout) {
    return std::make_unique<TransformerBlock>(config, block_index, layout);
}

}  // namespace nb

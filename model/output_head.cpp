// Output head: final RMSNorm, LM head, softmax cross-entropy, mean over the microbatch's tokens.
//
//   h = rmsnorm(x) * g_final ; logits = h W^T ; loss = mean_n (lse(logits[n]) - logits[n, target[n]])
#include <memory>
#include <stdexcept>

#include "model/output_head.h"

namespace nb {

namespace {

class OutputHead final : public Layer {
public:
    OutputHead(const ModelConfig& config, ParamLayout& layout)
        : eps_(static_cast<float>(config.norm_eps)),
          hidden_(config.hidden_size),
          vocab_(config.vocab_size),
          norm_(layout.add({"final_norm.weight", {config.hidden_size}, ParamKind::norm_gain})),
          head_(config.tie_embeddings
                    ? layout.index_of("embedding.weight")
                    : layout.add({"lm_head.weight", {config.vocab_size, config.hidden_size}, ParamKind::output_head})) {
        if (head_ < 0) throw std::logic_error("tied output head built without the embedding in its layout");
    }

    std::string name() const override { return "output_head"; }

    Tensor forward(const LayerContext& ctx, const Tensor& x, Stash* stash) const override {
        Ops& ops = ctx.ops;
        const int64_t n = ctx.batch.rows();
        Tensor rstd = ops.f32_output({n});
        Tensor h = ops.output({n, hidden_});
        ops.rmsnorm_forward(h, rstd, x, ctx.weights[norm_], eps_);
        Tensor logits = ops.output({n, vocab_});
        ops.linear_forward(logits, h, ctx.weights[head_]);
        Tensor row_loss = ops.f32_output({n});
        Tensor lse = ops.f32_output({n});
        ops.cross_entropy_forward(row_loss, lse, logits, ctx.batch.targets);
        Tensor loss = Tensor::zeros({1});  // a host scalar on every backend
        loss.f32()[0] = static_cast<float>(ops.sum(row_loss) / static_cast<double>(n));
        if (stash) {
            auto saved = std::make_shared<HeadSaved>();
            saved->x = x, saved->rstd = rstd, saved->lse = lse;
            if (!stash->recompute_logits) saved->h = h, saved->logits = logits;
            stash->saved = saved;
        }
        return loss;
    }

protected:
    // B: dlogits, dh = dlogits W, dx through the norm. W: dW += dlogits^T h, dgain. With tied embeddings W is the
    // embedding's table, whose gradient also gets the embedding layer's part on a one-stage model.
    Tensor backward_pass(const LayerContext& ctx, const Tensor& dout, const Stash& stash,
                         WeightGrads& wg) const override {
        Ops& ops = ctx.ops;
        const HeadSaved& s = stash.saved_as<HeadSaved>();
        const int64_t n = ctx.batch.rows();
        const float dloss = dout.f32()[0] / static_cast<float>(n);
        Tensor h = s.h, logits = s.logits;
        if (!logits.defined()) {  // full recomputation: the forward's two ops again, the same bits
            Tensor rstd = ops.f32_output({n});
            h = ops.output({n, hidden_});
            ops.rmsnorm_forward(h, rstd, s.x, ctx.weights[norm_], eps_);
            logits = ops.output({n, vocab_});
            ops.linear_forward(logits, h, ctx.weights[head_]);
        }
        Tensor dlogits = ops.activation({n, vocab_});
        ops.cross_entropy_backward(dlogits, logits, s.lse, ctx.batch.targets, dloss);
        Tensor dh = ops.activation({n, hidden_});
        wg.linear_backward(dh, head_, dlogits, h);
        Tensor dx = ops.activation({n, hidden_});
        wg.rmsnorm_backward(dx, norm_, dh, s.x, s.rstd);
        return dx;
    }

private:
    float eps_;
    int64_t hidden_, vocab_;
    int norm_, head_;
};

}  // namespace

Tensor head_logits(Ops& ops, const ModelConfig& config, const ParamLayout& layout, const TensorSet& weights,
                   const Tensor& x) {
    const int64_t n = x.numel() / config.hidden_size;
    Tensor rstd = ops.f32_output({n});
    Tensor h = ops.output({n, config.hidden_size});
    ops.rmsnorm_forward(h, rstd, x, weights[layout.index_of("final_norm.weight")], static_cast<float>(config.norm_eps));
    Tensor logits = ops.output({n, config.vocab_size});
    ops.linear_forward(logits, h, weights[layout.index_of(config.tie_embeddings ? "embedding.weight" : "lm_head.weight")]);
    return logits;
}

std::unique_ptr<Layer> make_output_head(const ModelConfig& config, ParamLayout& layout) {
    return std::make_unique<OutputHead>(config, layout);
}

}  // namespace nb

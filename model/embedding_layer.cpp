// Token embedding: x[n, :] = E[token[n], :].
#include <fmt/format.h>

#include "model/layer.h"

namespace nb {

namespace {

class EmbeddingLayer final : public Layer {
public:
    EmbeddingLayer(const ModelConfig& config, ParamLayout& layout)
        : hidden_(config.hidden_size),
          table_(layout.add({"embedding.weight", {config.vocab_size, config.hidden_size}, ParamKind::embedding})) {}

    std::string name() const override { return "embedding"; }

    Tensor forward(const LayerContext& ctx, const Tensor& in, Stash* stash) const override {
        Tensor x = ctx.ops.output({ctx.batch.rows(), hidden_});
        ctx.ops.embedding_forward(x, ctx.batch.tokens, ctx.weights[table_]);
        return x;
    }

protected:
    // No input, so no input half: all of it is the weight half.
    Tensor backward_pass(const LayerContext& ctx, const Tensor& dout, const Stash&, WeightGrads& wg) const override {
        wg.embedding(table_, ctx.batch.tokens, dout);
        return {};
    }

private:
    int64_t hidden_;
    int table_;
};

}  // namespace

std::unique_ptr<Layer> make_embedding_layer(const ModelConfig& config, ParamLayout& layout) {
    return std::make_unique<EmbeddingLayer>(config, layout);
}

}  // namespace nb

// Finite-difference checks of every layer's backward (embedding, transformer block, output head, the MoE
// feed-forward) and of the whole model's forward_backward, on a small config with grouped-query attention.
//
// Objective: L = sum(out * R) (R random) for the embedding and the block; the loss itself (times dloss) for the
// head and the whole model. Forward runs in fp32 and L is accumulated in double; each gradient element is
// compared with the Richardson-extrapolated central difference (4 D(h) - D(2h)) / 3, where
// D(s) = (L(p + s) - L(p - s)) / (actual step), over all or a sample of each tensor's elements.
//
// Verdict per tensor, both scale-free so small gradients (norm gains, deep q/k weights) are held to the same
// standard as large ones:
//   rel  = ||analytic - numeric|| / ||numeric||   over the checked elements
//   elem = max |analytic - numeric| / max |numeric|
// fp32 rounding noise keeps both near 1e-4 here (at most ~7e-4 for the whole model); a missing or wrong term
// of a backward moves them to 1e-2 or more, so the tolerances (1e-3 per layer, 2e-3 for the whole model) sit
// between the two.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "src/cpu/cpu_ops.h"
#include "tests/unit/fd_check.h"
#include "model/layer.h"
#include "model/moe_layer.h"
#include "model/stage_model.h"
#include "model/model_step.h"

using namespace nb;
using namespace nb::test;

namespace {

ModelConfig small_config(bool tied = false) {
    const ModelConfig c{.preset = "fd-small", .vocab_size = 32, .hidden_size = 16, .ffn_hidden_size = 24,
                        .num_layers = 2, .num_heads = 4, .num_kv_heads = 2, .tie_embeddings = tied};
    c.validate();
    return c;
}

// Weights large enough that every non-linearity is exercised (attention far from uniform, silu far from
// linear, norms far from their gains): matrices N(0, 0.3^2), embedding N(0, 1), gains 1 + 0.2 N(0, 1).
TensorSet random_weights(const ParamLayout& layout, std::mt19937& rng) {
    TensorSet w = TensorSet::zeros(layout);
    for (int i = 0; i < layout.size(); ++i) {
        const ParamKind kind = layout[i].kind;
        const float stddev = kind == ParamKind::embedding ? 1.0f : kind == ParamKind::norm_gain ? 0.2f : 0.3f;
        w[i] = randn(layout[i].shape, rng, stddev);
        if (kind == ParamKind::norm_gain)
            for (int64_t j = 0; j < w[i].numel(); ++j) w[i].f32()[j] += 1.0f;
    }
    return w;
}

Microbatch random_batch(const ModelConfig& c, int64_t batch_size, int64_t seq_len, std::mt19937& rng) {
    Microbatch mb;
    mb.batch_size = batch_size;
    mb.seq_len = seq_len;
    mb.tokens = rand_ids({mb.rows()}, static_cast<int32_t>(c.vocab_size), rng);
    mb.targets = rand_ids({mb.rows()}, static_cast<int32_t>(c.vocab_size), rng);
    return mb;
}

struct FdTol {
    double h = 1e-2;
    double rel = 1e-3;     // ||a - n|| / ||n||
    double elem = 1.5e-3;  // max |a - n| / max |n|
    int64_t max_samples = 96;
};

struct FdSummary {
    int64_t checked = 0;
    double rel = 0.0, elem = 0.0, numeric_norm = 0.0;
    int64_t worst_index = -1;
    double worst_analytic = 0.0, worst_numeric = 0.0;
};

FdSummary fd_measure(Tensor& x, const Tensor& analytic, const std::function<double()>& objective, std::mt19937& rng,
                     const FdTol& tol) {
    REQUIRE(x.numel() == analytic.numel());
    FdSummary s;
    float* xp = x.f32();
    const float* ap = analytic.f32();
    double diff2 = 0.0, num2 = 0.0, worst = -1.0, max_num = 0.0;
    for (int64_t i : sample_indices(x.numel(), tol.max_samples, rng)) {
        const float x0 = xp[i];
        // Central difference with the step actually taken (x0 +- step rounded to float).
        auto central = [&](double step) {
            const float plus = static_cast<float>(x0 + step), minus = static_cast<float>(x0 - step);
            xp[i] = plus;
            const double lp = objective();
            xp[i] = minus;
            const double lm = objective();
            xp[i] = x0;
            return (lp - lm) / (static_cast<double>(plus) - minus);
        };
        // Richardson extrapolation cancels the h^2 term: O(h^4) truncation, so the check is limited by fp32
        // noise only, even where the objective curves strongly.
        const double numeric = (4.0 * central(tol.h) - central(2.0 * tol.h)) / 3.0;
        const double diff = std::fabs(ap[i] - numeric);
        diff2 += diff * diff;
        num2 += numeric * numeric;
        max_num = std::max(max_num, std::fabs(numeric));
        if (!(diff <= worst)) {
            worst = diff;
            s.worst_index = i;
            s.worst_analytic = ap[i];
            s.worst_numeric = numeric;
        }
        ++s.checked;
    }
    s.numeric_norm = std::sqrt(num2);
    s.rel = num2 > 0 ? std::sqrt(diff2 / num2) : INFINITY;
    s.elem = max_num > 0 ? worst / max_num : INFINITY;
    return s;
}

FdSummary fd_expect(const std::string& name, Tensor& x, const Tensor& analytic,
                    const std::function<double()>& objective, std::mt19937& rng, const FdTol& tol = {}) {
    const FdSummary s = fd_measure(x, analytic, objective, rng, tol);
    INFO("gradient of ", name, " (", s.checked, " elements): rel ", s.rel, ", elem ", s.elem, "; worst at ",
         s.worst_index, ": analytic ", s.worst_analytic, " vs numeric ", s.worst_numeric, "; |numeric| ",
         s.numeric_norm);
    CHECK(s.checked > 0);
    CHECK(s.numeric_norm > 1e-4);  // a gradient that is zero everywhere checks nothing
    CHECK(s.rel <= tol.rel);
    CHECK(s.elem <= tol.elem);
    return s;
}

// One layer with its own layout, weights and gradients.
struct LayerUnderTest {
    ParamLayout layout;
    std::unique_ptr<Layer> layer;
    TensorSet weights, grads;

    // Once the layer has filled the layout: weights from random_weights, gradients zero.
    void randomize(std::mt19937& rng) {
        weights = random_weights(layout, rng);
        grads = TensorSet::zeros(layout);
    }
};

// `check` on small_config untied and then tied (what the head and the whole model depend on), each with its own
// ops and a generator seeded `untied_seed` untied, `untied_seed` + 1 tied.
void for_untied_and_tied(unsigned untied_seed,
                         const std::function<void(CpuOps&, std::mt19937&, const ModelConfig&, bool tied)>& check) {
    for (bool tied : {false, true}) {
        CAPTURE(tied);
        CpuOps ops;
        std::mt19937 rng(untied_seed + (tied ? 1 : 0));
        check(ops, rng, small_config(tied), tied);
    }
}

// Transformer block `index` of `c`, randomized.
LayerUnderTest block_under_test(const ModelConfig& c, int index, std::mt19937& rng) {
    LayerUnderTest t;
    t.layer = make_transformer_block(c, index, t.layout);
    t.randomize(rng);
    return t;
}

}  // namespace

TEST_CASE("embedding layer backward matches finite differences") {
    CpuOps ops;
    std::mt19937 rng(101);
    const ModelConfig c = small_config();
    LayerUnderTest t;
    t.layer = make_embedding_layer(c, t.layout);
    REQUIRE(t.layout.size() == 1);
    t.randomize(rng);
    // Repeated tokens make the scatter-add accumulate more than one row into a table row.
    Microbatch mb = random_batch(c, 2, 5, rng);
    mb.tokens.i32()[3] = mb.tokens.i32()[7] = mb.tokens.i32()[8];
    const Tensor R = randn({mb.rows(), c.hidden_size}, rng);

    LayerContext ctx{ops, t.weights, &t.grads, mb};
    Stash stash;
    const Tensor out = t.layer->forward(ctx, Tensor{}, &stash);
    CHECK(out.shape() == Shape{mb.rows(), c.hidden_size});
    const Tensor din = t.layer->backward(ctx, R, stash);
    CHECK_FALSE(din.defined());

    LayerContext eval{ops, t.weights, nullptr, mb};
    auto objective = [&] { return dot(t.layer->forward(eval, Tensor{}, nullptr), R); };
    // Rows of tokens that never occur must get exactly zero; check every element.
    fd_expect("embedding.weight", t.weights[0], t.grads[0], objective, rng, {.max_samples = 1 << 20});
}

TEST_CASE("transformer block backward matches finite differences") {
    CpuOps ops;
    std::mt19937 rng(102);
    const ModelConfig c = small_config();
    LayerUnderTest t = block_under_test(c, 1, rng);
    REQUIRE(t.layout.size() == 9);
    CHECK(t.layout[0].name == "layers.1.attn_norm.weight");
    const Microbatch mb = random_batch(c, 2, 5, rng);
    Tensor x = randn({mb.rows(), c.hidden_size}, rng);
    const Tensor R = randn({mb.rows(), c.hidden_size}, rng);

    LayerContext ctx{ops, t.weights, &t.grads, mb};
    Stash stash;
    const Tensor out = t.layer->forward(ctx, x, &stash);
    CHECK(out.shape() == x.shape());
    const Tensor dx = t.layer->backward(ctx, R, stash);
    REQUIRE(dx.shape() == x.shape());

    LayerContext eval{ops, t.weights, nullptr, mb};
    auto objective = [&] { return dot(t.layer->forward(eval, x, nullptr), R); };
    fd_expect("x", x, dx, objective, rng, {.max_samples = 1 << 20});
    for (int i = 0; i < t.layout.size(); ++i) {
        CAPTURE(t.layout[i].name);
        fd_expect(t.layout[i].name, t.weights[i], t.grads[i], objective, rng);
    }
}

TEST_CASE("transformer block backward accumulates into the weight gradients") {
    // Two backward passes over the same stash contents give exactly twice the gradient of one (every op +=).
    CpuOps ops;
    std::mt19937 rng(103);
    const ModelConfig c = small_config();
    LayerUnderTest t = block_under_test(c, 0, rng);
    const Microbatch mb = random_batch(c, 2, 5, rng);
    const Tensor x = randn({mb.rows(), c.hidden_size}, rng), R = randn({mb.rows(), c.hidden_size}, rng);
    TensorSet once = TensorSet::zeros(t.layout), twice = TensorSet::zeros(t.layout);
    for (int rep = 0; rep < 2; ++rep) {
        TensorSet& g = rep == 0 ? once : twice;
        for (int k = 0; k <= rep; ++k) {
            LayerContext ctx{ops, t.weights, &g, mb};
            Stash stash;
            t.layer->forward(ctx, x, &stash);
            t.layer->backward(ctx, R, stash);
        }
    }
    for (int i = 0; i < t.layout.size(); ++i) {
        CAPTURE(t.layout[i].name);
        Tensor doubled = once[i].clone();
        ops.scale_inplace(doubled, 2.0f);
        CHECK(max_rel_diff(twice[i], doubled) < 1e-6);
    }
}

TEST_CASE("MoE feed-forward backward matches finite differences") {
    // Objective L = sum(out * R) + L_aux, so the router's gradient carries the gates' and the aux loss's parts.
    // The selection is piecewise constant; each objective evaluation checks that the step did not change it (the
    // seeds are chosen so that no score lies within a step of the k-th best).
    struct Variant {
        std::string name;
        MoeConfig moe;
        bool bias;
    };
    const Variant variants[] = {
        {"top-2 of 4, shared expert, renorm, bias, aux", {4, 2, 12, 10, 0.3, true}, true},
        {"top-1 of 3, plain", {3, 1, 12, 0, 0.0, false}, false},
    };
    uint32_t seed = 106;
    for (const Variant& v : variants) {
        CAPTURE(v.name);
        CpuOps ops;
        std::mt19937 rng(seed++);
        const ModelConfig c = small_config();
        ParamLayout layout;
        const MoeFeedForward moe(c.hidden_size, v.moe, "layers.1.moe", layout);
        CHECK(layout[0].name == "layers.1.moe.router.weight");
        CHECK(layout[1].name == "layers.1.moe.experts.0.w_gate");
        CHECK(layout.size() == 1 + 3 * v.moe.num_experts + (v.moe.has_shared_expert() ? 3 : 0));
        TensorSet weights = random_weights(layout, rng);
        TensorSet grads = TensorSet::zeros(layout);
        const Microbatch mb = random_batch(c, 2, 5, rng);
        Tensor h = randn({mb.rows(), c.hidden_size}, rng);
        const Tensor R = randn({mb.rows(), c.hidden_size}, rng);
        const Tensor bias = v.bias ? randn({v.moe.num_experts}, rng, 0.05f) : Tensor{};

        LayerContext ctx{ops, weights, &grads, mb};
        MoeSaved stash;
        const MoeOutput fwd = moe.forward(ctx, h, bias, &stash);
        CHECK(fwd.out.shape() == h.shape());
        const Tensor chosen = stash.topk_expert.clone();
        const Tensor dh = moe.backward(ctx, R, 1.0f, stash);
        REQUIRE(dh.shape() == h.shape());

        LayerContext eval{ops, weights, nullptr, mb};
        auto objective = [&] {
            MoeSaved s;
            const MoeOutput o = moe.forward(eval, h, bias, &s);
            REQUIRE(std::memcmp(s.topk_expert.data(), chosen.data(), chosen.bytes()) == 0);
            return dot(o.out, R) + o.aux_loss.f32()[0];
        };
        fd_expect("h", h, dh, objective, rng);
        for (int i = 0; i < layout.size(); ++i) {
            CAPTURE(layout[i].name);
            fd_expect(layout[i].name, weights[i], grads[i], objective, rng);
        }
    }
}

TEST_CASE("output head backward matches finite differences") {
    for_untied_and_tied(104, [](CpuOps& ops, std::mt19937& rng, const ModelConfig& c, bool tied) {
        LayerUnderTest t;
        // A tied head reads the embedding matrix, which must already be in the layout.
        if (tied) make_embedding_layer(c, t.layout);
        t.layer = make_output_head(c, t.layout);
        REQUIRE(t.layout.size() == 2);
        CHECK(t.layout[tied ? 0 : 1].name == (tied ? "embedding.weight" : "lm_head.weight"));
        CHECK(t.layout.index_of("final_norm.weight") >= 0);
        t.randomize(rng);
        const Microbatch mb = random_batch(c, 2, 5, rng);
        Tensor x = randn({mb.rows(), c.hidden_size}, rng);
        const float dloss = 0.75f;  // the head scales by d(objective)/d(mean loss)

        LayerContext ctx{ops, t.weights, &t.grads, mb};
        Stash stash;
        const Tensor loss = t.layer->forward(ctx, x, &stash);
        REQUIRE(loss.numel() == 1);
        Tensor dout = Tensor::zeros({1});
        dout.f32()[0] = dloss;
        const Tensor dx = t.layer->backward(ctx, dout, stash);
        REQUIRE(dx.shape() == x.shape());

        LayerContext eval{ops, t.weights, nullptr, mb};
        auto objective = [&] { return dloss * static_cast<double>(t.layer->forward(eval, x, nullptr).f32()[0]); };
        // The loss is a mean over 10 rows, so it moves by ~1e-3 per step: a larger step keeps fp32 noise small.
        const FdTol tol{.h = 3e-2, .max_samples = 1 << 20};
        fd_expect("x", x, dx, objective, rng, tol);
        for (int i = 0; i < t.layout.size(); ++i) {
            CAPTURE(t.layout[i].name);
            fd_expect(t.layout[i].name, t.weights[i], t.grads[i], objective, rng, tol);
        }
    });
}

TEST_CASE("whole model forward_backward matches finite differences") {
    for_untied_and_tied(106, [](CpuOps& ops, std::mt19937& rng, const ModelConfig& c, bool tied) {
        const StageModel model(c, whole_model_spec(c));
        TensorSet weights = random_weights(model.layout(), rng);
        TensorSet grads = TensorSet::zeros(model.layout());
        const Microbatch mb = random_batch(c, 2, 5, rng);
        const float dloss = 1.5f;
        const float loss = forward_backward(ops, model, weights, grads, mb, dloss);
        CHECK(loss == forward_loss(ops, model, weights, mb));
        auto objective = [&] { return dloss * static_cast<double>(forward_loss(ops, model, weights, mb)); };
        // A few elements of every parameter: each kind (embedding, hidden matrices, norm gains, head) and
        // every block.
        // Loss-level noise through two blocks is larger than a single layer's; h = 1e-2 keeps the
        // extrapolation's h^4 term small where the tied head makes the loss curve strongly.
        const FdTol tol{.h = 1e-2, .rel = 2e-3, .elem = 3e-3, .max_samples = 12};
        for (int i = 0; i < model.layout().size(); ++i) {
            CAPTURE(model.layout()[i].name);
            fd_expect(model.layout()[i].name, weights[i], grads[i], objective, rng, tol);
        }
    });
}

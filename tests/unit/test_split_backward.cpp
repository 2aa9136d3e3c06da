// Split backward == fused backward, bit for bit, for every layer (model/weight_grads.h says why it must hold).
//
// For each case a stage's layers run forward twice on the same microbatch; one copy of the stashes goes through
// the fused stage_backward, the other through stage_backward_input (B) and later stage_backward_weight (W). The
// input gradient and every parameter gradient must have the same bits. The gradients start from random values,
// not zero, so that "adds into" is checked too. Between B and W the gradients must be untouched and the stash must
// hold exactly the buffers W reads; after W it must be empty.
#include <doctest/doctest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "model/layer.h"
#include "model/model_step.h"
#include "model/stage_model.h"
#include "src/cpu/cpu_ops.h"
#include "tests/unit/fd_check.h"

using namespace nb;

namespace {

ModelConfig dense_config(bool tied) {
    ModelConfig c{.preset = "split-small", .vocab_size = 40, .hidden_size = 16, .ffn_hidden_size = 24,
                  .num_layers = 3, .num_heads = 4, .num_kv_heads = 2, .tie_embeddings = tied};
    c.validate();
    return c;
}

// Block 1 an MoE block with a shared expert, the aux loss and the expert bias: every product of the MoE's backward.
ModelConfig moe_config() {
    ModelConfig c = dense_config(false);
    c.moe.num_experts = 4;
    c.moe.topk = 2;
    c.moe.ffn_hidden_size = 12;
    c.moe.shared_ffn_hidden_size = 8;
    c.moe.aux_loss_coeff = 0.01;
    c.moe.expert_bias = true;
    c.moe_layers = "1";
    c.resolve_moe_layers();
    c.validate();
    return c;
}

bool same_bits(const Tensor& a, const Tensor& b) {
    return a.shape() == b.shape() && std::memcmp(a.data(), b.data(), a.bytes()) == 0;
}

TensorSet random_set(const ParamLayout& layout, std::mt19937& rng) {
    TensorSet s = TensorSet::zeros(layout);
    for (int i = 0; i < layout.size(); ++i) s[i] = test::randn(layout[i].shape, rng, 0.1f);
    return s;
}

TensorSet copy_of(const ParamLayout& layout, const TensorSet& from) {
    TensorSet s = TensorSet::zeros(layout);
    for (int i = 0; i < layout.size(); ++i) s[i].copy_from(from[i]);
    return s;
}

struct Case {
    std::string name;
    ModelConfig config;
    StageSpec spec;
};

std::vector<Case> cases() {
    const ModelConfig dense = dense_config(false), tied = dense_config(true), moe = moe_config();
    return {
        {"embedding + block 0", dense, {0, 1, true, false}},
        {"a middle block", dense, {1, 2, false, false}},
        {"block + untied head", dense, {2, 3, false, true}},
        {"block + tied head (the head's own copy)", tied, {2, 3, false, true}},
        {"whole tied model (the table gets the head's and the embedding's parts)", tied, whole_model_spec(tied)},
        {"an MoE block (router, experts, shared expert, loads)", moe, {1, 2, false, false}},
        {"whole MoE model", moe, whole_model_spec(moe)},
    };
}

struct Run {
    Microbatch batch;
    TensorSet weights;
    Tensor dy;  // what the stage's backward starts from
};

Run make_run(const StageModel& model, std::mt19937& rng) {
    const ModelConfig& c = model.config();
    Run r;
    r.batch.batch_size = 2;
    r.batch.seq_len = 5;
    r.batch.tokens = test::rand_ids({r.batch.rows()}, static_cast<int32_t>(c.vocab_size), rng);
    r.batch.targets = test::rand_ids({r.batch.rows()}, static_cast<int32_t>(c.vocab_size), rng);
    r.weights = model.init_weights(11);
    for (int i = 0; i < model.layout().size(); ++i)  // away from init: gains not 1, matrices larger
        if (model.layout()[i].kind != ParamKind::expert_bias)
            r.weights[i] = test::randn(model.layout()[i].shape, rng, 0.3f);
    r.dy = model.spec().has_head ? loss_gradient(1.0f) : test::randn({r.batch.rows(), c.hidden_size}, rng, 1.0f);
    return r;
}

Tensor input_of(const StageModel& model, const Run& r, std::mt19937& rng) {
    if (model.spec().has_embedding) return {};
    return test::randn({r.batch.rows(), model.config().hidden_size}, rng, 1.0f);
}

}  // namespace

TEST_CASE("split backward: B then W gives the fused backward's bits, for every layer") {
    CpuOps ops;
    for (const Case& k : cases()) {
        SUBCASE(k.name.c_str()) {
            std::mt19937 rng(42);
            const StageModel model(k.config, k.spec);
            const ParamLayout& layout = model.layout();
            const Run r = make_run(model, rng);
            const Tensor x = input_of(model, r, rng);
            const TensorSet start = random_set(layout, rng);

            TensorSet fused_grads = copy_of(layout, start);
            const LayerContext fused_ctx{ops, r.weights, &fused_grads, r.batch};
            std::vector<Stash> fused_stashes;
            stage_forward(model, fused_ctx, x, &fused_stashes);
            const Tensor fused_dx = stage_backward(model, fused_ctx, r.dy, fused_stashes);

            TensorSet split_grads = copy_of(layout, start);
            const LayerContext split_ctx{ops, r.weights, &split_grads, r.batch};
            std::vector<Stash> stashes;
            stage_forward(model, split_ctx, x, &stashes);
            const Tensor split_dx = stage_backward_input(model, split_ctx, r.dy, stashes);

            // Between B and W: no gradient touched, the stash holds only what W reads.
            for (int i = 0; i < layout.size(); ++i) CHECK_MESSAGE(same_bits(split_grads[i], start[i]), layout[i].name);
            size_t held = 0;
            for (const Stash& s : stashes) {
                CHECK(!s.saved);
                CHECK(s.bytes() == held_bytes(s.deferred));
                held += s.bytes();
            }
            CHECK(held > 0);
            CHECK(stash_bytes(stashes) == held);

            stage_backward_weight(model, split_ctx, stashes);
            CHECK(stash_bytes(stashes) == 0);
            for (const Stash& s : stashes) CHECK(s.deferred.empty());

            CHECK(fused_dx.defined() == split_dx.defined());
            if (fused_dx.defined()) CHECK(same_bits(fused_dx, split_dx));
            for (int i = 0; i < layout.size(); ++i)
                CHECK_MESSAGE(same_bits(fused_grads[i], split_grads[i]), layout[i].name);
        }
    }
}

// The zero-bubble pattern: several microbatches' B run before any W, and their W follow in microbatch order. The
// gradient sum must be the fused one's, microbatch after microbatch.
TEST_CASE("split backward: F1 F2 B1 B2 W1 W2 sums as fused 1 then fused 2") {
    CpuOps ops;
    const ModelConfig c = moe_config();
    const StageModel model(c, whole_model_spec(c));
    const ParamLayout& layout = model.layout();
    std::mt19937 rng(7);
    const Run r1 = make_run(model, rng), r2 = make_run(model, rng);
    const TensorSet& weights = r1.weights;

    TensorSet fused = TensorSet::zeros(layout);
    for (const Run* r : {&r1, &r2}) {
        const LayerContext ctx{ops, weights, &fused, r->batch};
        std::vector<Stash> stashes;
        stage_forward(model, ctx, Tensor{}, &stashes);
        stage_backward(model, ctx, r->dy, stashes);
    }

    TensorSet split = TensorSet::zeros(layout);
    const LayerContext ctx1{ops, weights, &split, r1.batch}, ctx2{ops, weights, &split, r2.batch};
    std::vector<Stash> s1, s2;
    stage_forward(model, ctx1, Tensor{}, &s1);
    stage_forward(model, ctx2, Tensor{}, &s2);
    stage_backward_input(model, ctx1, r1.dy, s1);
    stage_backward_input(model, ctx2, r2.dy, s2);
    stage_backward_weight(model, ctx1, s1);
    stage_backward_weight(model, ctx2, s2);
    for (int i = 0; i < layout.size(); ++i) CHECK_MESSAGE(same_bits(fused[i], split[i]), layout[i].name);
}

TEST_CASE("split backward: B twice on one stash is refused") {
    CpuOps ops;
    const ModelConfig c = dense_config(false);
    const StageModel model(c, {1, 2, false, false});
    std::mt19937 rng(3);
    const Run r = make_run(model, rng);
    TensorSet grads = TensorSet::zeros(model.layout());
    const LayerContext ctx{ops, r.weights, &grads, r.batch};
    std::vector<Stash> stashes;
    stage_forward(model, ctx, input_of(model, r, rng), &stashes);
    stage_backward_input(model, ctx, r.dy, stashes);
    CHECK_THROWS_AS(model.layers()[0]->backward_input(ctx, r.dy, stashes[0]), std::logic_error);
}

namespace {

// Copies the slots a backward says are done, when it says so (what a bucket of the replica sum would take then).
struct DoneSnapshots final : GradsDoneObserver {
    const TensorSet* grads = nullptr;
    std::vector<int> firsts;
    std::vector<TensorSet> taken;  // taken[k]: the slots [firsts[k], n) at that call
    void grads_done_from(int first_param) override {
        firsts.push_back(first_param);
        TensorSet s;
        for (int i = first_param; i < grads->size(); ++i) s.tensors.push_back((*grads)[i].clone());
        taken.push_back(std::move(s));
    }
};

// Every snapshot equals the final gradient, the calls name ever smaller slots, one per layer, the last 0.
void check_snapshots(const DoneSnapshots& d, const StageModel& model, const TensorSet& final_grads) {
    REQUIRE(d.firsts.size() == model.layers().size());
    CHECK(d.firsts.back() == 0);
    for (size_t k = 0; k < d.firsts.size(); ++k) {
        if (k > 0) CHECK(d.firsts[k] <= d.firsts[k - 1]);
        for (int i = d.firsts[k]; i < final_grads.size(); ++i)
            CHECK_MESSAGE(same_bits(d.taken[k][i - d.firsts[k]], final_grads[i]), model.layout()[i].name);
    }
}

}  // namespace

// The data-parallel sum starts a bucket once the backward says its slots are done (pipeline/transport/replica_sum.h):
// what the observer is told must be true, fused and split, on every kind of stage (a tied head adds onto slot 0).
TEST_CASE("backward: the slots it says are done hold their final gradient") {
    CpuOps ops;
    for (const Case& k : cases()) {
        CAPTURE(k.name);
        const StageModel model(k.config, k.spec);
        const ParamLayout& layout = model.layout();
        std::mt19937 rng(5);
        const Run r = make_run(model, rng);
        const Tensor x = input_of(model, r, rng);
        for (bool split : {false, true}) {
            TensorSet grads = random_set(layout, rng);
            const LayerContext ctx{ops, r.weights, &grads, r.batch};
            std::vector<Stash> stashes;
            stage_forward(model, ctx, x, &stashes);
            DoneSnapshots done;
            done.grads = &grads;
            if (split) {
                stage_backward_input(model, ctx, r.dy, stashes);
                stage_backward_weight(model, ctx, stashes, &done);
            } else {
                stage_backward(model, ctx, r.dy, stashes, &done);
            }
            check_snapshots(done, model, grads);
        }
    }
}

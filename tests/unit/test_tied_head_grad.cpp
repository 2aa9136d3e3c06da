// model/tied_head_grad.h: on a stage holding both ends of a tied matrix the head's half of its gradient goes to a
// slot of its own, and E + H at the step is the bits a pipeline gets from the first stage's half and the last
// stage's copy's, each summed over the microbatches on its own.
#include <doctest/doctest.h>

#include <random>
#include <vector>

#include "model/model_step.h"
#include "model/stage_model.h"
#include "model/tied_head_grad.h"
#include "src/cpu/cpu_ops.h"
#include "tests/unit/fd_check.h"

using namespace nb;

namespace {

ModelConfig tied_config() {
    ModelConfig c{.preset = "tied-small", .vocab_size = 40, .hidden_size = 16, .ffn_hidden_size = 24,
                  .num_layers = 2, .num_heads = 4, .num_kv_heads = 2, .tie_embeddings = true};
    c.validate();
    return c;
}

Microbatch random_batch(std::mt19937& rng, int32_t vocab) {
    Microbatch b;
    b.batch_size = 2;
    b.seq_len = 6;  // tokens repeat: the embedding's scatter adds several rows into one
    b.tokens = test::rand_ids({b.rows()}, vocab, rng);
    b.targets = test::rand_ids({b.rows()}, vocab, rng);
    return b;
}

// The two-stage pipeline's step on `batches`: stage 0 (embedding, block 0) and stage 1 (block 1, the head with
// its copy), each summing its own gradients; then the halves added, E + H.
std::vector<Tensor> two_stage_grads(Ops& ops, const ModelConfig& c, const std::vector<Microbatch>& batches) {
    const StageModel first(c, {0, 1, true, false}), last(c, {1, 2, false, true});
    const TensorSet w0 = first.init_weights(7), w1 = last.init_weights(7);
    TensorSet g0 = gradient_slots(first, Device::cpu), g1 = gradient_slots(last, Device::cpu);
    for (const Microbatch& b : batches) {
        const LayerContext c0{ops, w0, &g0, b}, c1{ops, w1, &g1, b};
        std::vector<Stash> s0, s1;
        const Tensor x = stage_forward(first, c0, Tensor{}, &s0);
        stage_forward(last, c1, x, &s1);
        stage_backward(first, c0, stage_backward(last, c1, loss_gradient(), s1), s0);
    }
    ops.add_inplace(g0[0], g1[0]);
    std::vector<Tensor> out(g0.tensors);                               // the matrix, block 0
    out.insert(out.end(), g1.tensors.begin() + 1, g1.tensors.end());  // block 1, the final norm
    return out;
}

}  // namespace

TEST_CASE("tied head grad: one stage's E + H is the two-stage pipeline's sum, bit for bit") {
    CpuOps ops;
    const ModelConfig c = tied_config();
    std::mt19937 rng(3);
    const std::vector<Microbatch> batches = {random_batch(rng, 40), random_batch(rng, 40), random_batch(rng, 40)};

    const StageModel whole(c, whole_model_spec(c));
    REQUIRE(holds_both_tied_ends(whole));
    const TensorSet w = whole.init_weights(7);
    TensorSet grads = gradient_slots(whole, Device::cpu);
    REQUIRE(tied_head_slot(whole, grads) == whole.layout().size());
    for (const Microbatch& b : batches) forward_backward(ops, whole, w, grads, b);
    add_tied_head_half(ops, whole, grads);
    CHECK(ops.sum_squares(grads[whole.layout().size()]) == 0);  // the head's slot is spent

    const std::vector<Tensor> split = two_stage_grads(ops, c, batches);
    REQUIRE(static_cast<int>(split.size()) == whole.layout().size());
    for (int i = 0; i < whole.layout().size(); ++i) {
        CAPTURE(whole.layout()[i].name);
        CHECK(test::bitwise_equal(grads[i], split[static_cast<size_t>(i)]));
    }
}

TEST_CASE("tied head grad: without its slot both halves add onto the matrix's as each backward goes") {
    const ModelConfig c = tied_config();
    const StageModel whole(c, whole_model_spec(c));
    const TensorSet plain = TensorSet::zeros(whole.layout());
    CHECK(tied_head_slot(whole, plain) == -1);
    ModelConfig untied = c;
    untied.tie_embeddings = false;
    const StageModel untied_whole(untied, whole_model_spec(untied));
    CHECK_FALSE(holds_both_tied_ends(untied_whole));
    CHECK(gradient_slots(untied_whole, Device::cpu).size() == untied_whole.layout().size());
}

// model/stash_bytes.h against the layers themselves: a stage's forward, fused backward and split backward run on the
// CPU under each --recompute-granularity, and what their stashes hold (Stash::bytes) after the forward, at the most
// during each backward, and between B and W equals the plan's four figures.
#include <doctest/doctest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "model/config.h"
#include "model/model_step.h"
#include "model/recompute.h"
#include "model/stage_model.h"
#include "model/stash_bytes.h"
#include "src/cpu/cpu_ops.h"
#include "tests/unit/fd_check.h"

using namespace nb;
using namespace nb::test;

namespace {

// tiny, tiny tied, tiny-moe (blocks 1..3 MoE with a shared expert: the stages below mix dense and MoE blocks), and
// tiny-moe without the shared expert.
ModelConfig variant_config(int variant) {
    ModelConfig c = model_preset(variant >= 2 ? "tiny-moe" : "tiny");
    c.tie_embeddings = variant == 1;
    if (variant == 3) c.moe.shared_ffn_hidden_size = 0;
    return c;
}

struct Measured {
    int64_t kept = 0, backward_peak = 0, input_half_peak = 0, weight_half = 0;
};

Measured measure(const ModelConfig& c, const StageSpec& spec, const RecomputeConfig& recompute) {
    CpuOps ops;
    std::mt19937 rng(7);
    const int64_t B = 2, T = 24;
    Microbatch mb;
    mb.batch_size = B;
    mb.seq_len = T;
    mb.tokens = rand_ids({B * T}, static_cast<int32_t>(c.vocab_size), rng);
    mb.targets = rand_ids({B * T}, static_cast<int32_t>(c.vocab_size), rng);
    const StageModel model(c, spec);
    const TensorSet weights = model.init_weights(3);
    TensorSet grads = TensorSet::zeros(model.layout());
    LayerContext ctx{ops, weights, &grads, mb};
    // A stage without the embedding receives the residual stream, one without the head a gradient, from its
    // neighbours.
    const Tensor x = spec.has_embedding ? Tensor{} : randn({B * T, c.hidden_size}, rng);
    const Tensor dy = spec.has_head ? loss_gradient() : randn({B * T, c.hidden_size}, rng);
    Measured m;
    std::vector<Stash> stashes;
    stage_forward(model, ctx, x, &stashes, recompute);
    m.kept = static_cast<int64_t>(stash_bytes(stashes));
    size_t peak = 0;
    stage_backward(model, ctx, dy, stashes, nullptr, &peak);
    m.backward_peak = static_cast<int64_t>(peak);
    stashes.clear();
    stage_forward(model, ctx, x, &stashes, recompute);
    stage_backward_input(model, ctx, dy, stashes, &peak);
    m.input_half_peak = static_cast<int64_t>(peak);
    m.weight_half = static_cast<int64_t>(stash_bytes(stashes));
    return m;
}

}  // namespace

TEST_CASE("microbatch_stash_bytes equals what the stashes hold, under every granularity") {
    using G = RecomputeGranularity;
    using M = RecomputeMethod;
    const std::vector<RecomputeConfig> granularities = {
        {G::none, M::uniform, 1}, {G::selective, M::uniform, 1}, {G::full, M::uniform, 1},
        {G::full, M::uniform, 2}, {G::full, M::block, 1}};
    for (int variant : {0, 1, 2, 3}) {
        const ModelConfig c = variant_config(variant);
        const std::vector<StageSpec> specs = {whole_model_spec(c), {0, 2, true, false}, {2, 4, false, true},
                                              {1, 3, false, false}, {4, 4, false, true}};
        for (const StageSpec& spec : specs) {
            for (const RecomputeConfig& recompute : granularities) {
                CAPTURE(variant);
                CAPTURE(spec.first_block);
                CAPTURE(spec.end_block);
                CAPTURE(recompute_granularity_name(recompute.granularity));
                CAPTURE(recompute.num_layers);
                CAPTURE(recompute_method_name(recompute.method));
                const Measured got = measure(c, spec, recompute);
                const MicrobatchStashBytes want = microbatch_stash_bytes(c, spec, 2, 24, recompute);
                CHECK(got.kept > 0);
                CHECK(got.kept == want.kept);
                CHECK(got.backward_peak == want.backward_peak);
                CHECK(got.input_half_peak == want.input_half_peak);
                CHECK(got.weight_half == want.weight_half);
            }
        }
    }
}

TEST_CASE("full keeps far less than selective, selective less than none; a rerun's peak is one group's") {
    const ModelConfig c = model_preset("tiny");
    const StageSpec spec{0, 4, true, false};
    const MicrobatchStashBytes none = microbatch_stash_bytes(c, spec, 2, 512);
    const MicrobatchStashBytes selective = microbatch_stash_bytes(c, spec, 2, 512, {RecomputeGranularity::selective});
    const MicrobatchStashBytes full = microbatch_stash_bytes(c, spec, 2, 512, {RecomputeGranularity::full});
    CHECK(none.backward_peak == none.kept);  // nothing is made again: the backward only frees
    CHECK(selective.kept < none.kept);
    CHECK(full.kept * 5 < selective.kept);
    CHECK(full.kept == 4 * 2 * 512 * c.hidden_size * 4);  // each block's input
    // The last block's group rerun on top of the three inputs before it.
    CHECK(full.backward_peak == 3 * 2 * 512 * c.hidden_size * 4 + none.kept / 4);
    CHECK(none.weight_half == full.weight_half);  // W reads the same whatever was kept
}

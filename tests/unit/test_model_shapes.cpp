// Model shapes and bookkeeping: parameter counts of the presets, the activation-memory plan against real
// stashes, stage-independent initialisation, the canonical parameter order, and the parameter cut's optimality
// (its contiguity and the cost cut: test_pipeline_cut.cpp).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "src/cpu/cpu_ops.h"
#include "src/core/error.h"
#include "tests/unit/fd_check.h"
#include "tests/unit/test_util.h"
#include "model/config.h"
#include "model/layer.h"
#include "model/partition.h"
#include "model/stage_model.h"
#include "optim/muon.h"

using namespace nb;
using namespace nb::test;

namespace {

int64_t layout_count(const ModelConfig& c, const StageSpec& spec) {
    // Builds the layout (names and shapes) only; no weights are allocated.
    return StageModel(c, spec).layout().total_numel();
}

ModelConfig tied_tiny() {
    ModelConfig c = model_preset("tiny");
    c.tie_embeddings = true;
    return c;
}

// The largest stage (by parameters) of a cut given as block boundaries 0 = b0 < b1 < ... < bP = L.
int64_t largest_stage(const ModelConfig& c, const std::vector<int64_t>& bounds) {
    const int P = static_cast<int>(bounds.size()) - 1;
    int64_t worst = 0;
    for (int s = 0; s < P; ++s)
        worst = std::max(worst, stage_param_count(c, {bounds[s], bounds[s + 1], s == 0, s == P - 1}));
    return worst;
}


}  // namespace

TEST_CASE("preset parameter counts match the published sizes") {
    struct Want {
        const char* preset;
        int64_t params;
    };
    // tiny: 4 blocks of 786,944 + two 256x256 embedding/head matrices + the final norm.
    for (const Want& w : {Want{"tiny", 3'279'104}, Want{"smollm-135m", 134'515'008}, Want{"smollm-360m", 361'821'120}}) {
        CAPTURE(w.preset);
        const ModelConfig c = model_preset(w.preset);
        const StageSpec whole = whole_model_spec(c);
        CHECK(whole.first_block == 0);
        CHECK(whole.end_block == c.num_layers);
        CHECK(whole.has_embedding);
        CHECK(whole.has_head);
        CHECK(stage_param_count(c, whole) == w.params);
        CHECK(layout_count(c, whole) == w.params);
    }
    CHECK(model_preset("smollm-135m").tie_embeddings);
    CHECK(model_preset("smollm-360m").tie_embeddings);
}

TEST_CASE("stage parameter counts agree with the stage layouts") {
    // Including a tied last stage without the embedding, which holds its own copy of the matrix.
    for (const char* preset : {"tiny", "tiny-moe", "small", "smollm-135m", "smollm-360m", "moe-1b", "moe-10b"}) {
        for (bool flip_tie : {false, true}) {
            ModelConfig c = model_preset(preset);
            if (flip_tie) c.tie_embeddings = !c.tie_embeddings;
            for (int P : {1, 2, 3, 4}) {
                CAPTURE(preset);
                CAPTURE(c.tie_embeddings);
                CAPTURE(P);
                const std::vector<StageSpec> specs = partition_model(c, P);
                int64_t sum = 0;
                for (const StageSpec& s : specs) {
                    CHECK(stage_param_count(c, s) == layout_count(c, s));
                    sum += stage_param_count(c, s);
                }
                const int64_t embedding = c.vocab_size * c.hidden_size;
                const int64_t whole = stage_param_count(c, whole_model_spec(c));
                CHECK(sum == whole + (c.tie_embeddings && P > 1 ? embedding : 0));
            }
        }
    }
}

TEST_CASE("the expert bias is a zero f32 buffer per MoE block, present only when enabled, not a parameter") {
    ModelConfig c = model_preset("tiny-moe");
    const StageSpec whole = whole_model_spec(c);
    const ParamLayout plain = StageModel(c, whole).layout();
    c.moe.expert_bias = true;
    const StageModel model(c, whole);
    const ParamLayout& layout = model.layout();
    int buffers = 0;
    for (int64_t b = 0; b < c.num_layers; ++b) {
        const int i = layout.index_of(fmt::format("layers.{}.moe.expert_bias", b));
        CHECK((i >= 0) == c.is_moe_block(b));
        CHECK(plain.index_of(fmt::format("layers.{}.moe.expert_bias", b)) == -1);
        if (i < 0) continue;
        ++buffers;
        CHECK(layout[i].kind == ParamKind::expert_bias);
        CHECK(!layout[i].trainable());
        CHECK(layout[i].shape == Shape{c.moe.num_experts});
        for (uint64_t seed : {1, 7}) {
            const TensorSet w = model.init_weights(seed);
            for (int64_t e = 0; e < c.moe.num_experts; ++e) CHECK(w[i].f32()[e] == 0.0f);
        }
    }
    CHECK(buffers > 0);
    CHECK(layout.size() == plain.size() + buffers);
    CHECK(layout.trainable_numel() == plain.total_numel());  // parameter counts leave buffers out
    CHECK(layout.trainable_numel() == stage_param_count(c, whole));
    CHECK(layout.total_numel() == plain.total_numel() + buffers * c.moe.num_experts);
    const TrainableParams t = trainable_params(layout);
    REQUIRE(t.layout.size() == plain.size());
    for (int i = 0; i < plain.size(); ++i) CHECK(t.layout[i].name == plain[i].name);  // the optimizer's view
}

// docs/moe.md "How the optimizers treat experts": Muon's Newton-Schulz runs on each expert's w_gate, w_up, w_down alone
// (separate [f, d] / [d, f] parameters, never one stacked [E f, d]) and on the router [E, d] as on any hidden matrix.
TEST_CASE("Muon sees the router and each expert's matrices as separate hidden matrices") {
    const ModelConfig c = model_preset("tiny-moe");
    const ParamLayout layout = StageModel(c, whole_model_spec(c)).layout();
    for (int64_t b = 0; b < c.num_layers; ++b) {
        if (!c.is_moe_block(b)) continue;
        const int router = layout.index_of(fmt::format("layers.{}.moe.router.weight", b));
        REQUIRE(router >= 0);
        CHECK(layout[router].shape == Shape{c.moe.num_experts, c.hidden_size});
        CHECK(Muon::takes_muon(layout[router]));
        for (int64_t e = 0; e < c.moe.num_experts; ++e)
            for (const char* m : {"w_gate", "w_up", "w_down"}) {
                const int i = layout.index_of(fmt::format("layers.{}.moe.experts.{}.{}", b, e, m));
                REQUIRE(i >= 0);
                CHECK(Muon::takes_muon(layout[i]));
                CHECK(shape_numel(layout[i].shape) == c.moe.ffn_hidden_size * c.hidden_size);
            }
    }
}

TEST_CASE("init_weights does not depend on how the model is cut into stages") {
    for (bool tied : {false, true}) {
        CAPTURE(tied);
        const ModelConfig c = tied ? tied_tiny() : model_preset("tiny");
        const uint64_t seed = 42;
        const StageModel whole(c, whole_model_spec(c));
        const TensorSet whole_w = whole.init_weights(seed);
        int matched = 0;
        for (const StageSpec& spec : {StageSpec{0, 2, true, false}, StageSpec{2, 4, false, true}}) {
            const StageModel stage(c, spec);
            const TensorSet w = stage.init_weights(seed);
            for (int i = 0; i < stage.layout().size(); ++i) {
                const ParamInfo& p = stage.layout()[i];
                CAPTURE(p.name);
                const int j = whole.layout().index_of(p.name);
                REQUIRE(j >= 0);
                CHECK(whole.layout()[j].shape == p.shape);
                CHECK(whole.layout()[j].kind == p.kind);
                CHECK(bitwise_equal(w[i], whole_w[j]));
                // The tied copy on the last stage is not counted: the first stage owns the embedding.
                if (!(tied && !spec.has_embedding && p.name == "embedding.weight")) ++matched;
            }
        }
        CHECK(matched == whole.layout().size());  // the stages cover the whole model's parameters
        // A different seed gives different matrices; gains start at 1.
        const TensorSet other = whole.init_weights(seed + 1);
        for (int i = 0; i < whole.layout().size(); ++i) {
            CAPTURE(whole.layout()[i].name);
            if (whole.layout()[i].kind == ParamKind::norm_gain) {
                const float* p = whole_w[i].f32();
                CHECK(std::all_of(p, p + whole_w[i].numel(), [](float v) { return v == 1.0f; }));
            } else {
                CHECK_FALSE(bitwise_equal(whole_w[i], other[i]));
            }
        }
    }
}

TEST_CASE("init_weights draws matrices with the documented standard deviations") {
    const ModelConfig c = model_preset("tiny");
    const StageModel model(c, whole_model_spec(c));
    const TensorSet w = model.init_weights(5);
    const double residual = 0.02 / std::sqrt(2.0 * static_cast<double>(c.num_layers));
    CpuOps ops;
    for (int i = 0; i < model.layout().size(); ++i) {
        const ParamInfo& p = model.layout()[i];
        if (p.kind == ParamKind::norm_gain) continue;
        CAPTURE(p.name);
        const double n = static_cast<double>(w[i].numel());
        const double mean = ops.sum(w[i]) / n;
        const double std = std::sqrt(ops.sum_squares(w[i]) / n - mean * mean);
        const bool is_residual = p.name.ends_with("attn.wo") || p.name.ends_with("mlp.w_down");
        const double want = is_residual ? residual : 0.02;
        CHECK(std::fabs(std - want) < 0.03 * want);  // >= 32k samples per matrix: ~0.4% standard error
        CHECK(std::fabs(mean) < 0.03 * want);
    }
}

TEST_CASE("the canonical parameter order") {
    for (bool tied : {false, true}) {
        CAPTURE(tied);
        const ModelConfig c = tied ? tied_tiny() : model_preset("tiny");
        const StageModel model(c, whole_model_spec(c));
        const ParamLayout& layout = model.layout();
        std::vector<std::string> want = {"embedding.weight"};
        for (int64_t i = 0; i < c.num_layers; ++i)
            for (const char* leaf : {"attn_norm.weight", "attn.wq", "attn.wk", "attn.wv", "attn.wo", "mlp_norm.weight",
                                     "mlp.w_gate", "mlp.w_up", "mlp.w_down"})
                want.push_back("layers." + std::to_string(i) + "." + leaf);
        want.push_back("final_norm.weight");
        if (!tied) want.push_back("lm_head.weight");
        std::vector<std::string> got;
        for (const ParamInfo& p : layout.params()) got.push_back(p.name);
        CHECK(got == want);
        CHECK(layout[0].kind == ParamKind::embedding);
        CHECK(layout[0].shape == Shape{c.vocab_size, c.hidden_size});
        const int fn = layout.index_of("final_norm.weight");
        CHECK(layout[fn].kind == ParamKind::norm_gain);
        if (!tied) {
            CHECK(layout[layout.size() - 1].kind == ParamKind::output_head);
            CHECK(layout[layout.size() - 1].shape == Shape{c.vocab_size, c.hidden_size});
        }
        // Shapes of one block: [out, in] linears with grouped-query k/v.
        CHECK(layout[layout.index_of("layers.0.attn.wk")].shape == Shape{c.kv_dim(), c.hidden_size});
        CHECK(layout[layout.index_of("layers.0.mlp.w_down")].shape == Shape{c.hidden_size, c.ffn_hidden_size});
        CHECK(layout[layout.index_of("layers.0.mlp.w_gate")].shape == Shape{c.ffn_hidden_size, c.hidden_size});
        CHECK_FALSE(layout[layout.index_of("layers.0.attn_norm.weight")].weight_decay());
        CHECK(layout[layout.index_of("layers.0.attn.wq")].weight_decay());
    }
    // A stage's layout is the whole model's order restricted to what it holds.
    const ModelConfig c = model_preset("tiny");
    const StageModel last(c, {2, 4, false, true});
    CHECK(last.layout()[0].name == "layers.2.attn_norm.weight");
    CHECK(last.layout()[last.layout().size() - 1].name == "lm_head.weight");
}

TEST_CASE("partition_model minimises the largest stage (brute force over every cut)") {
    struct Case {
        const char* preset;
        int P;
    };
    for (const Case& k : {Case{"smollm-135m", 4}, Case{"smollm-135m", 2}, Case{"smollm-135m", 3},
                          Case{"smollm-360m", 4}, Case{"tiny", 2}, Case{"tiny", 3}, Case{"small", 4},
                          Case{"tiny-moe", 2}, Case{"moe-10b", 4}, Case{"moe-10b", 5}}) {
        CAPTURE(k.preset);
        CAPTURE(k.P);
        const ModelConfig c = model_preset(k.preset);
        const std::vector<StageSpec> specs = partition_model(c, k.P);
        std::vector<int64_t> chosen = {0};
        for (const StageSpec& s : specs) chosen.push_back(s.end_block);
        REQUIRE(static_cast<int>(chosen.size()) == k.P + 1);
        const int64_t ours = largest_stage(c, chosen);
        int64_t best = std::numeric_limits<int64_t>::max();
        std::vector<int64_t> first_best;  // the optimal cut that gives earlier stages the fewest blocks
        int64_t cuts = 0;
        for_each_cut(c.num_layers, k.P, [&](const std::vector<int64_t>& b) {
            ++cuts;
            const int64_t m = largest_stage(c, b);
            // Cuts come in lexicographic order of their boundaries, so the first optimum found is the one
            // whose earlier stages are smallest.
            if (m < best) {
                best = m;
                first_best = b;
            }
        });
        CHECK(cuts > 0);
        CHECK(ours == best);
        CHECK(chosen == first_best);
    }
}

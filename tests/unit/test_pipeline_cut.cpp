// The stage cuts (model/partition.h): both contiguous; the cost cut (partition_model_by_cost) against a brute force
// over every cut, with and without a memory bound; the memory bound against the memory check's own figures
// (src/run/cut_memory.h); a stage that memory makes smaller; big models; --pipeline-layout; and the one function
// that turns options into the cut (src/plan/pipeline_cut.h). The parameter cut's brute force is in
// test_model_shapes.cpp.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "model/config.h"
#include "model/flops.h"
#include "model/partition.h"
#include "model/stage_model.h"
#include "optim/optimizer_registry.h"
#include "pipeline/schedule/schedule.h"
#include "pipeline/stage/stage_memory.h"
#include "src/core/error.h"
#include "src/plan/pipeline_cut.h"
#include "src/plan/run_plan.h"
#include "src/run/cut_memory.h"
#include "tests/unit/test_util.h"

using namespace nb;
using namespace nb::test;

namespace {

std::vector<int64_t> bounds_of(const std::vector<StageSpec>& cut) {
    std::vector<int64_t> b = {0};
    for (const StageSpec& s : cut) b.push_back(s.end_block);
    return b;
}

StageSpec stage_of(const std::vector<int64_t>& b, int s) {
    const int P = static_cast<int>(b.size()) - 1;
    return {b[static_cast<size_t>(s)], b[static_cast<size_t>(s) + 1], s == 0, s == P - 1};
}

// The slowest stage's forward + backward FLOPs per token, straight from the FLOP model.
double slowest_stage(const ModelConfig& c, const std::vector<int64_t>& b, int64_t seq_len) {
    double worst = 0;
    for (int s = 0; s + 1 < static_cast<int>(b.size()); ++s)
        worst = std::max(worst, stage_flops_per_token(c, stage_of(b, s), seq_len).training());
    return worst;
}

bool every_stage_fits(const std::vector<int64_t>& b, const StageFits& fits) {
    for (int s = 0; s + 1 < static_cast<int>(b.size()); ++s)
        if (!fits(s, b[static_cast<size_t>(s)], b[static_cast<size_t>(s) + 1])) return false;
    return true;
}

// The first cut, in lexicographic order of its boundaries, of the least slowest stage among those that fit:
// the optimum that gives earlier stages the fewest blocks. Nothing when none fits.
std::optional<std::vector<int64_t>> brute_force(const ModelConfig& c, int P, int64_t seq_len, const StageFits& fits) {
    double best = std::numeric_limits<double>::infinity();
    std::optional<std::vector<int64_t>> first_best;
    for_each_cut(c.num_layers, P, [&](const std::vector<int64_t>& b) {
        if (fits && !every_stage_fits(b, fits)) return;
        const double m = slowest_stage(c, b, seq_len);
        if (m < best) {
            best = m;
            first_best = b;
        }
    });
    return first_best;
}

void check_contiguous(const std::vector<StageSpec>& specs, int P, int64_t L) {
    REQUIRE(static_cast<int>(specs.size()) == P);
    int64_t next = 0;
    for (int s = 0; s < P; ++s) {
        CHECK(specs[static_cast<size_t>(s)].first_block == next);
        CHECK(specs[static_cast<size_t>(s)].num_blocks() >= 1);
        CHECK(specs[static_cast<size_t>(s)].has_embedding == (s == 0));
        CHECK(specs[static_cast<size_t>(s)].has_head == (s == P - 1));
        next = specs[static_cast<size_t>(s)].end_block;
    }
    CHECK(next == L);
}

// Small models whose blocks differ (MoE blocks beside dense ones, a head worth a fraction of a block or several).
std::vector<ModelConfig> small_configs() {
    std::vector<ModelConfig> configs;
    for (const char* preset : {"tiny", "tiny-moe", "small", "smollm-135m"}) {
        ModelConfig c = model_preset(preset);
        c.tie_embeddings = false;
        configs.push_back(c);
    }
    ModelConfig narrow = model_preset("tiny");  // the embedding and head about a block each
    narrow.num_layers = 7;
    narrow.hidden_size = 32;
    narrow.ffn_hidden_size = 48;
    narrow.validate();
    configs.push_back(narrow);
    ModelConfig mixed = model_preset("tiny-moe");  // MoE blocks 1, 4 and 5 of 7
    mixed.num_layers = 7;
    mixed.moe_layers = "1,4,5";
    mixed.resolve_moe_layers();
    mixed.validate();
    configs.push_back(mixed);
    return configs;
}

// A run of `c` on P stages as train would plan it (1f1b unless said, AdamW, 8 x 64 tokens, m = 2P).
TrainOptions run_options(const ModelConfig& c, int P, ScheduleKind schedule = ScheduleKind::one_f_one_b) {
    TrainOptions o;
    o.model = c;
    o.stages = P;
    o.schedule = schedule;
    o.clip_scope = clip_scope_of(schedule);
    o.micro_batch_size = 8;
    o.seq_length = 64;
    o.num_microbatches = 2 * P;
    o.train_iters = 6;
    o.data_path = "unused";
    o.lr.lr = 1e-3;
    return o;
}

// What the memory check would count for stage s holding `spec`: estimate_stage_memory with the stage's full
// layout and the loads the run's action lists hold.
int64_t check_need(const TrainOptions& o, int s, const StageSpec& spec, DType dtype) {
    const std::vector<StagePlan> plans = build_schedule(
        {o.schedule, o.stages, o.num_microbatches, o.train_iters, o.sync_start, o.sync_cooldown});
    const StageLoad load{max_versions_held(plans, s), max_in_flight(plans, s)};
    return estimate_stage_memory(o, spec, StageModel(o.model, spec).layout(), load, dtype).total_bytes();
}

}  // namespace

TEST_CASE("both cuts cover every block contiguously, one or more per stage") {
    for (const char* preset : {"tiny", "tiny-moe", "small", "smollm-135m", "smollm-360m"}) {
        const ModelConfig c = model_preset(preset);
        for (int P = 1; P <= c.num_layers; ++P) {
            CAPTURE(preset);
            CAPTURE(P);
            check_contiguous(partition_model(c, P), P, c.num_layers);
            const StageCut cut = partition_model_by_cost(c, P, 256);
            check_contiguous(cut.stages, P, c.num_layers);
            CHECK(cut.fits_memory);
            CHECK(cut.bounds == std::vector<StageBound>(static_cast<size_t>(P), StageBound::cost));
        }
        const std::string too_many = fmt::format("{} pipeline stages but the model has only {} layers (each stage "
                                                 "needs one)", c.num_layers + 1, c.num_layers);
        CHECK(usage_error([&] { partition_model(c, static_cast<int>(c.num_layers) + 1); }) == too_many);
        CHECK(usage_error([&] { partition_model_by_cost(c, static_cast<int>(c.num_layers) + 1, 256); }) == too_many);
        CHECK_THROWS_AS(partition_model(c, 0), std::logic_error);  // --stages is checked by the plan
        CHECK_THROWS_AS(partition_model_by_cost(c, 0, 256), std::logic_error);
    }
}

TEST_CASE("the cost cut minimises the slowest stage's forward + backward FLOPs (brute force over every cut)") {
    for (const ModelConfig& c : small_configs())
        for (int P = 1; P <= std::min<int>(5, static_cast<int>(c.num_layers)); ++P)
            for (const int64_t seq_len : {int64_t{16}, int64_t{256}, int64_t{4096}}) {
                CAPTURE(c.preset);
                CAPTURE(c.num_layers);
                CAPTURE(P);
                CAPTURE(seq_len);
                const StageCut cut = partition_model_by_cost(c, P, seq_len);
                const std::optional<std::vector<int64_t>> want = brute_force(c, P, seq_len, {});
                REQUIRE(want);
                CHECK(slowest_stage(c, bounds_of(cut.stages), seq_len) == slowest_stage(c, *want, seq_len));
                CHECK(bounds_of(cut.stages) == *want);  // among equals, earlier stages the fewest blocks
            }
}

TEST_CASE("within a memory bound the cost cut is the best cut that fits (brute force), or says none fits") {
    // A bound that depends on the stage as a schedule's does (earlier stages hold more microbatches): the stage's
    // parameters times (P - s), under limits from loose to impossible.
    for (const ModelConfig& c : small_configs())
        for (int P = 2; P <= std::min<int>(4, static_cast<int>(c.num_layers)); ++P) {
            const int64_t whole = stage_param_count(c, whole_model_spec(c));
            for (const double share : {2.0, 0.9, 0.75, 0.6, 0.5, 0.45, 0.4, 0.3, 0.1}) {
                CAPTURE(c.preset);
                CAPTURE(c.num_layers);
                CAPTURE(P);
                CAPTURE(share);
                const auto limit = static_cast<int64_t>(share * static_cast<double>(whole));
                int questions = 0;
                const StageFits fits = [&](int s, int64_t first, int64_t end) {
                    ++questions;
                    return stage_param_count(c, {first, end, s == 0, s == P - 1}) * (P - s) <= limit;
                };
                const StageCut cut = partition_model_by_cost(c, P, 256, fits);
                check_contiguous(cut.stages, P, c.num_layers);
                CHECK(questions > 0);
                const std::optional<std::vector<int64_t>> want = brute_force(c, P, 256, fits);
                const std::vector<int64_t> blind = bounds_of(partition_model_by_cost(c, P, 256).stages);
                if (!want) {  // no cut fits: the memory-blind cut, for the memory check to refuse
                    CHECK_FALSE(cut.fits_memory);
                    CHECK(bounds_of(cut.stages) == blind);
                    continue;
                }
                CHECK(cut.fits_memory);
                CHECK(bounds_of(cut.stages) == *want);
                CHECK(every_stage_fits(bounds_of(cut.stages), fits));
                // A stage is bound by memory exactly where its range in the memory-blind cut would not fit it.
                for (int s = 0; s < P; ++s)
                    CHECK((cut.bounds[static_cast<size_t>(s)] == StageBound::memory) !=
                          fits(s, blind[static_cast<size_t>(s)], blind[static_cast<size_t>(s) + 1]));
            }
        }
}

TEST_CASE("the memory bound is the memory check's figure, to the byte, for every range of every stage") {
    // estimate_stage_memory with the stage's own layout and the loads of the run's action lists, against the
    // bound's O(1) sums over pieces: a budget of exactly the check's need fits, one byte less does not.
    for (const char* preset : {"tiny", "tiny-moe"})
        for (const ScheduleKind schedule :
             {ScheduleKind::gpipe, ScheduleKind::one_f_one_b, ScheduleKind::two_bw, ScheduleKind::pipedream})
            for (const auto& optimizer : optimizer_names())
                for (const DType dtype : {DType::f32, DType::bf16}) {
                    ModelConfig c = model_preset(preset);
                    c.num_layers = 4;
                    c.resolve_moe_layers();
                    TrainOptions o = run_options(c, 3, schedule);
                    o.optimizer.name = std::string(optimizer);
                    if (schedule == ScheduleKind::two_bw) o.delay_fix.kind = DelayFixKind::ef;
                    for (int s = 0; s < 3; ++s)
                        for (int64_t first = s; first <= 4 - (3 - s); ++first)
                            for (int64_t end = first + 1; end <= (s == 2 ? 4 : 4 - (2 - s)); ++end) {
                                if (s == 2 && end != 4) continue;
                                CAPTURE(preset);
                                CAPTURE(schedule_kind_name(schedule));
                                CAPTURE(optimizer);
                                CAPTURE(s);
                                CAPTURE(first);
                                CAPTURE(end);
                                const int64_t need = check_need(o, s, {first, end, s == 0, s == 2}, dtype);
                                CHECK(stage_memory_fits(o, {need, ""}, dtype)(s, first, end));
                                CHECK_FALSE(stage_memory_fits(o, {need - 1, ""}, dtype)(s, first, end));
                            }
                }
}

TEST_CASE("memory makes a stage smaller: stage 0 of 1f1b holds the most microbatches, and takes fewer blocks") {
    // smollm-135m untied, 4 stages, 1f1b with m = 8: stage 0 holds 4 microbatches in flight, the last stage 1.
    ModelConfig c = model_preset("smollm-135m");
    c.tie_embeddings = false;
    const TrainOptions o = run_options(c, 4);
    const StageCut blind = choose_pipeline_cut(o);
    const StageSpec& first = blind.stages[0];
    const int64_t stage0_need = check_need(o, 0, first, DType::f32);
    int64_t others = 0;
    for (int s = 1; s < 4; ++s) others = std::max(others, check_need(o, s, blind.stages[static_cast<size_t>(s)], DType::f32));
    REQUIRE(others < stage0_need);  // the budget below binds stage 0 alone
    const int64_t budget = stage0_need - 1;
    const StageFits fits = stage_memory_fits(o, {budget, ""}, DType::f32);
    const StageCut cut = choose_pipeline_cut(o, fits);
    CHECK(cut.fits_memory);
    CHECK(cut.bounds[0] == StageBound::memory);
    CHECK(cut.stages[0].num_blocks() < first.num_blocks());
    for (int s = 0; s < 4; ++s) CHECK(check_need(o, s, cut.stages[static_cast<size_t>(s)], DType::f32) <= budget);
    const std::optional<std::vector<int64_t>> want = brute_force(c, 4, o.seq_length, fits);
    REQUIRE(want);
    CHECK(bounds_of(cut.stages) == *want);
    // The slowest stage is slower than without the bound, but no fitting cut does better (the brute force).
    CHECK(slowest_stage(c, bounds_of(cut.stages), o.seq_length) >= slowest_stage(c, bounds_of(blind.stages), o.seq_length));
    // Memory for none: the memory-blind cut, marked so.
    const StageCut none = choose_pipeline_cut(o, stage_memory_fits(o, {1, ""}, DType::f32));
    CHECK_FALSE(none.fits_memory);
    CHECK(bounds_of(none.stages) == bounds_of(blind.stages));
}

TEST_CASE("the cost cut of a 100000-layer model takes moments, with and without a memory bound") {
    ModelConfig c = model_preset("tiny");
    c.num_layers = 100000;
    c.tie_embeddings = false;
    const auto t0 = std::chrono::steady_clock::now();
    const StageCut cut = partition_model_by_cost(c, 8, 256);
    check_contiguous(cut.stages, 8, c.num_layers);
    // Equal blocks: every stage but the last (which has the head) holds 12500 blocks or one more.
    for (int s = 0; s + 1 < 8; ++s) CHECK(std::abs(cut.stages[static_cast<size_t>(s)].num_blocks() - 12500) <= 150);
    const TrainOptions o = run_options(c, 8);
    const int64_t need = check_need(o, 0, cut.stages[0], DType::f32);
    const StageCut bound = partition_model_by_cost(c, 8, 256, stage_memory_fits(o, {need - 1, ""}, DType::f32));
    check_contiguous(bound.stages, 8, c.num_layers);
    CHECK(bound.stages[0].num_blocks() < cut.stages[0].num_blocks());
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    CHECK(seconds < 30);  // a few tenths of a second; the bound is for a loaded machine
}

TEST_CASE("--pipeline-layout: blocks per stage, one clear error for each way it can be wrong") {
    CHECK(parse_pipeline_layout("3,4,4,2") == std::vector<int64_t>{3, 4, 4, 2});
    CHECK(parse_pipeline_layout("12") == std::vector<int64_t>{12});
    CHECK(usage_error([] { parse_pipeline_layout("3,4,0,2"); }) ==
          "--pipeline-layout '3,4,0,2': stage 2 would be empty (every stage needs at least one block)");
    for (const char* bad : {"3,x", "3,,4", "3,-1", "3,+1", "3,1.5", "", "3,", " 3", "99999999999999999999"}) {
        CAPTURE(bad);
        CHECK(usage_error([&] { parse_pipeline_layout(bad); }).find("is not a positive integer") != std::string::npos);
    }
    CHECK(usage_error([] { parse_pipeline_layout("3,x"); }) ==
          "--pipeline-layout '3,x': 'x' (stage 1) is not a positive integer (blocks per stage, e.g. 3,4,4,2)");
    const ModelConfig c = model_preset("small");  // 8 blocks
    const std::vector<StageSpec> cut = partition_model_by_layout(c, 3, {3, 4, 1});
    check_contiguous(cut, 3, 8);
    CHECK(bounds_of(cut) == std::vector<int64_t>{0, 3, 7, 8});
    CHECK(pipeline_layout_of(cut) == "3,4,1");
    CHECK(usage_error([&] { partition_model_by_layout(c, 4, {3, 4, 1}); }) ==
          "--pipeline-layout '3,4,1' names 3 stages but --stages is 4");
    CHECK(usage_error([&] { partition_model_by_layout(c, 3, {3, 4, 2}); }) ==
          "--pipeline-layout '3,4,2' holds 9 blocks but the model has 8 layers");
    CHECK(usage_error([&] { partition_model_by_layout(c, 9, {1, 1, 1, 1, 1, 1, 1, 1, 1}); }) ==
          "9 pipeline stages but the model has only 8 layers (each stage needs one)");
}

TEST_CASE("the options' cut: the layout over --pipeline-cut; params is partition_model; the plan takes it") {
    for (const char* preset : {"tiny", "small", "smollm-135m", "tiny-moe"}) {
        ModelConfig c = model_preset(preset);
        c.tie_embeddings = false;
        for (int P = 1; P <= 4; ++P) {
            CAPTURE(preset);
            CAPTURE(P);
            TrainOptions o = run_options(c, P);
            o.pipeline_cut = PipelineCut::params;
            const StageCut params = choose_pipeline_cut(o);
            CHECK(bounds_of(params.stages) == bounds_of(partition_model(c, P)));
            CHECK(params.bounds == std::vector<StageBound>(static_cast<size_t>(P), StageBound::params));
            CHECK(bounds_of(make_run_plan(o).cut) == bounds_of(params.stages));
            o.pipeline_cut = PipelineCut::cost;
            CHECK(bounds_of(choose_pipeline_cut(o).stages) ==
                  bounds_of(partition_model_by_cost(c, P, o.seq_length).stages));
            CHECK(bounds_of(make_run_plan(o).cut) == bounds_of(choose_pipeline_cut(o).stages));
            std::vector<int64_t> layout(static_cast<size_t>(P), 1);
            layout.back() = c.num_layers - (P - 1);
            o.pipeline_layout = layout;
            const StageCut given = choose_pipeline_cut(o);
            CHECK(pipeline_layout_of(given.stages) == pipeline_layout_of(partition_model_by_layout(c, P, layout)));
            CHECK(given.bounds == std::vector<StageBound>(static_cast<size_t>(P), StageBound::layout));
            CHECK(bounds_of(make_run_plan(o).cut) == bounds_of(given.stages));
        }
    }
    TrainOptions o = run_options(model_preset("tiny"), 2);
    o.pipeline_layout = {1, 2};
    CHECK(usage_error([&] { make_run_plan(o); }) == "--pipeline-layout '1,2' holds 3 blocks but the model has 4 layers");
    CHECK(describe_cut_choice(o) == "--pipeline-layout 1,2");
    o.pipeline_layout.clear();
    CHECK(describe_cut_choice(o) == "cost");
    CHECK(kPipelineCuts.names() == std::vector<std::string_view>{"cost", "params"});
    CHECK(parse_pipeline_cut("params") == PipelineCut::params);
    CHECK(usage_error([] { parse_pipeline_cut("flops"); }) == "unknown --pipeline-cut 'flops' (valid: cost, params)");
}

// The pipeline oracle (src/run/reference.h): its version rule against the table of docs/DESIGN.md section 2 written
// out again, its WeightHistory, and whole runs on a small corpus (the versions it really held, agreement with
// `train`).
#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "src/core/error.h"
#include "model/config.h"
#include "src/run/reference.h"
#include "pipeline/schedule/schedule.h"
#include "pipeline/stage/weight_history.h"
#include "tests/unit/pipeline_test_util.h"
#include "tests/unit/test_util.h"
#include "src/run/trainer.h"

using namespace nb;
using namespace nb::test;
using nb::reference::Schedule;
using nb::reference::weight_version;

namespace {

// ---- the version rule, docs/DESIGN.md section 2 written out again ----

int64_t design_version(Schedule schedule, int s, int p, int64_t t) {
    switch (schedule) {
        case Schedule::gpipe:
        case Schedule::one_f_one_b: return t;                            // g_t = grad F_t(W_t)
        case Schedule::two_bw: return t >= 1 ? t - 1 : 0;                // W_{max(t-1, 0)}
        case Schedule::pipedream: return t - (p - 1 - s) >= 0 ? t - (p - 1 - s) : 0;  // max(0, i-(p-1-s))
    }
    return -1;
}

std::vector<int64_t> versions_of_stage(Schedule schedule, int s, int p, int64_t steps) {
    std::vector<int64_t> v;
    for (int64_t t = 0; t < steps; ++t) v.push_back(weight_version(schedule, s, p, t));
    return v;
}

// ---- a small run ----

// 5 blocks (so 2, 3 and 4 stages cut unevenly), hidden 64, 2 sequences of 32 tokens, untied.
TrainOptions small_run(const std::string& data, const std::string& schedule, int stages, int64_t m,
                       int64_t iterations) {
    return pipeline_run(data, schedule, stages, m, iterations, {5, 64, 96, 32});
}

nb::reference::ReferenceSummary run_quietly(const TrainOptions& o) {
    NullLog log;
    return nb::reference::run_reference(nb::make_run_plan(o), log.f);
}

}  // namespace

TEST_CASE("reference: gpipe and 1f1b use W_t for step t on every stage") {
    for (Schedule schedule : {Schedule::gpipe, Schedule::one_f_one_b})
        for (int p : {1, 2, 3, 4})
            for (int s = 0; s < p; ++s)
                CHECK(versions_of_stage(schedule, s, p, 6) == std::vector<int64_t>{0, 1, 2, 3, 4, 5});
}

TEST_CASE("reference: 2bw uses W_{max(t-1,0)} on every stage, so its first two steps use W_0") {
    for (int p : {1, 2, 3, 4})
        for (int s = 0; s < p; ++s) {
            CHECK(weight_version(Schedule::two_bw, s, p, 0) == 0);
            CHECK(weight_version(Schedule::two_bw, s, p, 1) == 0);
            CHECK(versions_of_stage(Schedule::two_bw, s, p, 6) == std::vector<int64_t>{0, 0, 1, 2, 3, 4});
        }
}

TEST_CASE("reference: pipedream stage s lags p-1-s microbatches (worked tables)") {
    // p = 3: the last stage has no delay, stage 0 two.
    CHECK(versions_of_stage(Schedule::pipedream, 0, 3, 6) == std::vector<int64_t>{0, 0, 0, 1, 2, 3});
    CHECK(versions_of_stage(Schedule::pipedream, 1, 3, 6) == std::vector<int64_t>{0, 0, 1, 2, 3, 4});
    CHECK(versions_of_stage(Schedule::pipedream, 2, 3, 6) == std::vector<int64_t>{0, 1, 2, 3, 4, 5});
    // p = 4, stage 0: delay 3.
    CHECK(versions_of_stage(Schedule::pipedream, 0, 4, 6) == std::vector<int64_t>{0, 0, 0, 0, 1, 2});
    // p = 1: no delay at all (pipedream on one stage is synchronous with one microbatch per step).
    CHECK(versions_of_stage(Schedule::pipedream, 0, 1, 4) == std::vector<int64_t>{0, 1, 2, 3});
}

TEST_CASE("reference: --sync-start and --sync-cooldown steps use W_t; the asynchronous rule holds as if always") {
    using nb::reference::is_synchronous_step;
    using nb::reference::SyncSteps;
    const SyncSteps sync{2, 2, 8};  // steps 0, 1 and 6, 7 synchronous
    for (int64_t t = 0; t < 8; ++t) CHECK(is_synchronous_step(Schedule::two_bw, t, sync) == (t < 2 || t >= 6));
    CHECK(is_synchronous_step(Schedule::one_f_one_b, 4, sync));
    CHECK_FALSE(is_synchronous_step(Schedule::two_bw, 3, SyncSteps{0, 0, 8}));  // no flags: all asynchronous
    // 2bw: the first asynchronous step (2) is already one step stale, W_1; the cool-down goes back to W_t.
    std::vector<int64_t> two_bw, pipedream_s0;
    for (int64_t t = 0; t < 8; ++t) {
        two_bw.push_back(weight_version(Schedule::two_bw, 0, 3, t, sync));
        pipedream_s0.push_back(weight_version(Schedule::pipedream, 0, 3, t, sync));
    }
    CHECK(two_bw == std::vector<int64_t>{0, 1, 1, 2, 3, 4, 6, 7});
    // pipedream, stage 0 of 3 (delay 2): v = max(K, t - 2) with K = 2 while asynchronous.
    CHECK(pipedream_s0 == std::vector<int64_t>{0, 1, 2, 2, 2, 3, 6, 7});
}

TEST_CASE("reference: its version rule and the schedule builder's (pipeline/schedule/schedule.h) agree, sync flags included") {
    // Two implementations written apart: the oracle's formula, and the rule the executor's action lists carry.
    for (auto [kind, schedule] : {std::pair{nb::ScheduleKind::two_bw, Schedule::two_bw},
                                  std::pair{nb::ScheduleKind::pipedream, Schedule::pipedream}})
        for (int p : {2, 3, 4})
            for (int64_t start : {0, 1, 3})
                for (int64_t cooldown : {0, 2}) {
                    nb::ScheduleSpec spec;
                    spec.kind = kind;
                    spec.stages = p;
                    spec.microbatches = p;
                    spec.steps = 6;
                    spec.sync_start = start;
                    spec.sync_cooldown = cooldown;
                    const nb::reference::SyncSteps sync{start, cooldown, spec.optimizer_steps()};
                    for (int s = 0; s < p; ++s)
                        for (int64_t t = 0; t < spec.optimizer_steps(); ++t) {
                            CAPTURE(p);
                            CAPTURE(s);
                            CAPTURE(t);
                            CHECK(weight_version(schedule, s, p, t, sync) ==
                                  nb::weight_version(spec, s, t * spec.microbatches_per_step()));
                        }
                }
}

TEST_CASE("reference: the version rule of docs/DESIGN.md section 2, every schedule, p in {2,3,4}, never decreasing") {
    for (Schedule schedule : {Schedule::gpipe, Schedule::one_f_one_b, Schedule::two_bw, Schedule::pipedream})
        for (int p : {2, 3, 4})
            for (int s = 0; s < p; ++s)
                for (int64_t t = 0; t < 40; ++t) {
                    CAPTURE(p);
                    CAPTURE(s);
                    CAPTURE(t);
                    CHECK(weight_version(schedule, s, p, t) == design_version(schedule, s, p, t));
                    if (t > 0) CHECK(weight_version(schedule, s, p, t) >= weight_version(schedule, s, p, t - 1));
                }
}

TEST_CASE("reference: pipedream makes one optimizer step per microbatch, the others one per iteration") {
    using nb::reference::microbatches_per_step;
    using nb::reference::optimizer_steps;
    CHECK(optimizer_steps(Schedule::pipedream, 5, 4) == 20);
    CHECK(microbatches_per_step(Schedule::pipedream, 4) == 1);
    for (Schedule schedule : {Schedule::gpipe, Schedule::one_f_one_b, Schedule::two_bw}) {
        CHECK(optimizer_steps(schedule, 5, 4) == 5);
        CHECK(microbatches_per_step(schedule, 4) == 4);
    }
}

TEST_CASE("reference: schedule names") {
    // --schedule is parsed once, at the command line (src/plan/schedule_spec.h); the oracle names it its own way.
    auto oracle_of = [](const char* name) { return nb::reference::oracle_schedule(nb::parse_schedule_kind(name)); };
    CHECK(oracle_of("gpipe") == Schedule::gpipe);
    CHECK(oracle_of("1f1b") == Schedule::one_f_one_b);
    CHECK(oracle_of("2bw") == Schedule::two_bw);
    CHECK(oracle_of("pipedream") == Schedule::pipedream);
    CHECK(oracle_of("zb-h1") == Schedule::one_f_one_b);  // synchronous: 1f1b's rule, only the order differs
    CHECK(oracle_of("zb-v") == Schedule::one_f_one_b);
    CHECK_THROWS_WITH_AS(oracle_of("zb-h2"),
                         "unknown --schedule 'zb-h2' (valid: gpipe, 1f1b, 2bw, pipedream, zb-h1, zb-v)", nb::UsageError);
    CHECK_FALSE(nb::reference::is_asynchronous(Schedule::gpipe));
    CHECK_FALSE(nb::reference::is_asynchronous(Schedule::one_f_one_b));
    CHECK(nb::reference::is_asynchronous(Schedule::two_bw));
    CHECK(nb::reference::is_asynchronous(Schedule::pipedream));
}

// ---- WeightHistory ----

namespace {

TensorSet one_value(float x) {
    TensorSet set;
    set.tensors.push_back(nb::Tensor::zeros({1}));
    set[0].f32()[0] = x;
    return set;
}

}  // namespace

TEST_CASE("weight history: versions per stage, dropping, peak count, and errors for what is not held") {
    WeightHistory h(2);
    h.add(0, 0, one_value(10));
    h.add(1, 0, one_value(20));
    h.add(0, 1, one_value(11));
    h.add(0, 2, one_value(12));
    CHECK(h.held(0) == 3);
    CHECK(h.held(1) == 1);
    CHECK(h.newest(0) == 2);
    CHECK(h.at(0, 1)[0].f32()[0] == 11);
    CHECK(h.newest_weights(1)[0].f32()[0] == 20);

    h.drop_older_than(0, 2);
    CHECK(h.held(0) == 1);
    CHECK(h.peak_held(0) == 3);  // the peak stays
    CHECK(h.peak_held(1) == 1);
    CHECK_THROWS_WITH_AS(h.at(0, 1), "weight history: stage 0 does not hold version 1 (holds 2..2)", std::logic_error);
    CHECK_THROWS_AS(h.at(0, 7), std::logic_error);      // never added
    CHECK_THROWS_AS(h.at(2, 0), std::logic_error);      // no such stage
    CHECK_THROWS_AS(h.add(0, 2, one_value(0)), std::logic_error);  // versions only grow
    CHECK_THROWS_AS(h.newest(1 + 1), std::logic_error);
}

TEST_CASE("weight history: clone_tensors is a snapshot that later in-place updates leave alone") {
    TensorSet master = one_value(1);
    TensorSet snapshot = nb::clone_tensors(master);
    master[0].f32()[0] = 2;
    CHECK(snapshot[0].f32()[0] == 1);
}

// ---- whole runs ----

TEST_CASE("reference: the versions held at once are what the schedule needs (1; 2 for 2bw; p-s for pipedream)") {
    TempDir dir;
    const std::string data = write_corpus(dir);
    for (int p : {2, 3, 4}) {
        CAPTURE(p);
        CHECK(run_quietly(small_run(data, "1f1b", p, p, 3)).peak_versions == std::vector<int64_t>(p, 1));
        CHECK(run_quietly(small_run(data, "gpipe", p, p, 3)).peak_versions == std::vector<int64_t>(p, 1));
        CHECK(run_quietly(small_run(data, "2bw", p, p, 3)).peak_versions == std::vector<int64_t>(p, 2));
        std::vector<int64_t> pipedream;
        for (int s = 0; s < p; ++s) pipedream.push_back(p - s);
        CHECK(run_quietly(small_run(data, "pipedream", p, p, 2)).peak_versions == pipedream);
    }
}

TEST_CASE("reference: 1f1b cut into 1..4 stages ends with train's weights, bit for bit") {
    TempDir dir;
    const std::string data = write_corpus(dir);
    NullLog log;
    const std::string train = nb::run_training(nb::make_run_plan(small_run(data, "1f1b", 1, 3, 6)), log.f).weights_sha256;
    for (int p : {1, 2, 3, 4}) {
        CAPTURE(p);
        CHECK(run_quietly(small_run(data, "1f1b", p, 3, 6)).run.weights_sha256 == train);
    }
}

TEST_CASE("reference: 2bw's delay does not depend on the cut; pipedream's does") {
    TempDir dir;
    const std::string data = write_corpus(dir);
    // With clipping off (per-stage norms differ with the cut) 2bw computes the same thing for any p.
    auto two_bw = [&](int p) {
        TrainOptions o = small_run(data, "2bw", p, 4, 4);
        o.clip_grad = 0;
        return run_quietly(o).run.weights_sha256;
    };
    CHECK(two_bw(2) == two_bw(1));
    CHECK(two_bw(4) == two_bw(1));
    TrainOptions sync = small_run(data, "1f1b", 2, 4, 4);
    sync.clip_grad = 0;
    CHECK(run_quietly(sync).run.weights_sha256 != two_bw(1));
    auto pipedream = [&](int p) {
        TrainOptions o = small_run(data, "pipedream", p, 2, 3);
        o.clip_grad = 0;
        return run_quietly(o).run.weights_sha256;
    };
    CHECK(pipedream(2) != pipedream(1));
    CHECK(pipedream(3) != pipedream(2));
}

TEST_CASE("run plan: options the reference and the pipeline cannot run are usage errors naming the flag") {
    TempDir dir;
    const std::string data = write_corpus(dir);
    auto error_of = [](const TrainOptions& o) -> std::string {
        try {
            nb::make_run_plan(o);
        } catch (const nb::UsageError& e) {
            return e.what();
        }
        return "no error";
    };
    TrainOptions o = small_run(data, "1f1b", 2, 2, 2);
    CHECK(error_of(o) == "no error");

    TrainOptions bad = o;
    CHECK(nb::test::usage_error([] { nb::parse_schedule_kind("interleaved"); }) ==  // parsed at the command line
          "unknown --schedule 'interleaved' (valid: gpipe, 1f1b, 2bw, pipedream, zb-h1, zb-v)");
    bad = o;
    bad.stages = 6;
    CHECK(error_of(bad) == "6 pipeline stages but the model has only 5 layers (each stage needs one)");
    bad = o;
    bad.stages = 0;
    CHECK(error_of(bad) == "--stages must be positive, got 0");
    bad = small_run(data, "2bw", 3, 2, 2);
    CHECK(error_of(bad) == "--schedule 2bw needs --num-microbatches >= the number of stages (P): got "
                           "--num-microbatches 2 with 3 stages");
    bad = o;
    bad.clip_scope = nb::ClipScope::stage;
    CHECK(error_of(bad).find("--clip-scope stage does not fit --schedule 1f1b") == 0);
    bad = small_run(data, "pipedream", 2, 2, 2);
    bad.clip_scope = nb::ClipScope::global;
    CHECK(error_of(bad).find("--clip-scope global does not fit --schedule pipedream") == 0);
    CHECK(nb::test::usage_error([] { nb::parse_clip_scope("layer"); }) == "unknown --clip-scope 'layer' (valid: global, stage)");
    bad = o;
    bad.model.tie_embeddings = true;
    CHECK(error_of(bad) == "no error");  // the first and the last stage each hold the tied matrix
    bad.stages = 1;
    CHECK(error_of(bad) == "no error");  // one stage holds both ends

    // pipedream's LR schedule counts its T*m optimizer steps: a warm-up longer than T iterations is fine.
    TrainOptions warm = small_run(data, "pipedream", 2, 4, 3);
    warm.lr.warmup_iters = 8;
    CHECK(error_of(warm) == "no error");
    warm.lr.warmup_iters = 12;
    CHECK(error_of(warm).find("--lr-warmup-iters 12 must be < the decay iterations (12") == 0);
}

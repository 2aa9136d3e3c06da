// The pipeline runtime in one process: StageRunners over the in-process transport, driven round-robin
// (src/run/pipeline_driver.h), against the oracle (src/run/reference.h) for every schedule on 2 and 3 stages;
// a plan whose stages wait for each other deadlocks with a std::logic_error naming what each waits for; the
// runtime refuses a plan that would sum gradients out of microbatch order. Also the pieces: the in-process
// transport's message rules and the weight versions a stage holds.
#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include "src/cpu/cpu_ops.h"
#include "src/core/error.h"
#include "model/config.h"
#include "pipeline/transport/in_process_transport.h"
#include "src/run/pipeline_driver.h"
#include "pipeline/schedule/pipeline_setup.h"
#include "src/run/reference.h"
#include "pipeline/stage/weight_versions.h"
#include "tests/unit/pipeline_test_util.h"

using namespace nb;
using namespace nb::test;

namespace {

// A tiny model of 3 blocks (3 stages: one block each; 2 stages: cut unevenly), untied; 6 iterations.
TrainOptions tiny_run(const std::string& data, const std::string& schedule, int stages, int64_t m) {
    TrainOptions o = pipeline_run(data, schedule, stages, m, 6, {3, 32, 48, 16});
    o.eval_interval = 3;
    return o;
}

nb::PipelineSummary run_pipeline(const PipelineSetup& setup) {
    NullLog log;
    return nb::run_in_process(setup, nullptr, log.f);
}

nb::reference::ReferenceSummary run_oracle(const TrainOptions& o) {
    NullLog log;
    return nb::reference::run_reference(nb::make_run_plan(o), log.f);
}

// Moves the first action of `type` in `plan` to the front.
void move_first_to_front(nb::StagePlan& plan, ActionType type) {
    auto it = std::find_if(plan.begin(), plan.end(), [&](const nb::Action& a) { return a.type == type; });
    REQUIRE(it != plan.end());
    std::rotate(plan.begin(), it, it + 1);
}

}  // namespace

TEST_CASE("stage runner: every schedule on 2 and 3 stages in one process ends with the oracle's bits") {
    TempDir dir;
    const std::string data = write_corpus(dir);
    for (const char* schedule : {"gpipe", "1f1b", "2bw", "pipedream", "zb-h1"})
        for (int p : {2, 3})
            for (int64_t m : {int64_t{p}, int64_t{2 * p}}) {
                CAPTURE(schedule);
                CAPTURE(p);
                CAPTURE(m);
                const TrainOptions o = tiny_run(data, schedule, p, m);
                const PipelineSetup setup = nb::make_pipeline_setup(nb::make_run_plan(o));
                const nb::PipelineSummary got = run_pipeline(setup);
                const nb::reference::ReferenceSummary want = run_oracle(o);
                CHECK(got.run.weights_sha256 == want.run.weights_sha256);
                CHECK(got.run.final_train_loss == want.run.final_train_loss);
                CHECK(got.run.final_val_loss == want.run.final_val_loss);
                CHECK(got.run.steps == want.run.steps);
                // The versions held are the fewest the schedule allows: exactly what the oracle held.
                REQUIRE(got.peak_versions.size() == want.peak_versions.size());
                for (int s = 0; s < p; ++s) {
                    CHECK(got.peak_versions[static_cast<size_t>(s)] == want.peak_versions[static_cast<size_t>(s)]);
                    const auto part = static_cast<size_t>(s);
                    CHECK(got.peak_versions[part] == nb::part_peaks(setup.spec)[part].versions_held);
                }
            }
}

TEST_CASE("stage runner: stages that wait for each other deadlock with a logic_error naming each wait") {
    TempDir dir;
    PipelineSetup setup = nb::make_pipeline_setup(nb::make_run_plan(tiny_run(write_corpus(dir), "gpipe", 2, 2)));
    // Stage 0 now waits for the gradient of microbatch 0 before it sends microbatch 0's activation.
    setup.fixed_plans[0] = setup.stage_plan(0);
    move_first_to_front(setup.fixed_plans[0], ActionType::recv_gradient);
    CHECK_THROWS_WITH_AS(run_pipeline(setup),
                         doctest::Contains("pipeline deadlock: no stage can move; "
                                           "stage 0 waits at recv_gradient mb 0 from stage 1; "
                                           "stage 1 waits at recv_activation mb 0 from stage 0;"),
                         std::logic_error);
}

TEST_CASE("stage runner: backwards out of microbatch order are refused (gradients sum in microbatch order)") {
    TempDir dir;
    PipelineSetup setup = nb::make_pipeline_setup(nb::make_run_plan(tiny_run(write_corpus(dir), "gpipe", 2, 2)));
    // Stage 1 (the last): recv_activation 0, F0, recv_activation 1, F1, B0, send_gradient 0, B1, send_gradient 1,
    // step. Swap the two backwards with their sends.
    nb::StagePlan& plan = setup.fixed_plans[1] = setup.stage_plan(1);
    REQUIRE(plan[4].type == ActionType::backward);
    REQUIRE(plan[6].type == ActionType::backward);
    std::swap(plan[4], plan[6]);
    std::swap(plan[5], plan[7]);
    CHECK_THROWS_WITH_AS(run_pipeline(setup), doctest::Contains("stage 1: backward of microbatch 1 when 0 is next"),
                         std::logic_error);
}

TEST_CASE("stage runner: W out of microbatch order is refused; W before its B too") {
    TempDir dir;
    const std::string data = write_corpus(dir);
    auto swap_first_two = [](nb::StagePlan& plan, ActionType type) {
        std::vector<size_t> at;
        for (size_t i = 0; i < plan.size() && at.size() < 2; ++i)
            if (plan[i].type == type) at.push_back(i);
        REQUIRE(at.size() == 2);
        std::swap(plan[at[0]], plan[at[1]]);
    };
    PipelineSetup setup = nb::make_pipeline_setup(nb::make_run_plan(tiny_run(data, "zb-h1", 2, 2)));
    setup.fixed_plans[0] = setup.stage_plan(0);
    swap_first_two(setup.fixed_plans[0], ActionType::backward_weight);
    CHECK_THROWS_WITH_AS(run_pipeline(setup), doctest::Contains("stage 0: W of microbatch 1 when 0 is next"),
                         std::logic_error);
    setup = nb::make_pipeline_setup(nb::make_run_plan(tiny_run(data, "zb-h1", 2, 2)));
    setup.fixed_plans[1] = setup.stage_plan(1);
    move_first_to_front(setup.fixed_plans[1], ActionType::backward_weight);
    CHECK_THROWS_WITH_AS(run_pipeline(setup), doctest::Contains("stage 1: W of microbatch 0 before its B"),
                         std::logic_error);
}

// Under zb-h1 a microbatch's stash lives until its W: the last stage, which holds one microbatch from forward to
// backward under 1f1b, holds two (the second's forward stash while the first's waits for its W), and reports so.
TEST_CASE("stage runner: zb-h1's activation peak counts what W still holds") {
    TempDir dir;
    const std::string data = write_corpus(dir);
    auto peaks = [&](const char* schedule) {
        const PipelineSetup setup = nb::make_pipeline_setup(nb::make_run_plan(tiny_run(data, schedule, 2, 4)));
        std::vector<double> out;
        for (const auto& f : run_pipeline(setup).finals) out.push_back(f.act_peak_bytes);
        return out;
    };
    const std::vector<double> fused = peaks("1f1b"), split = peaks("zb-h1");
    REQUIRE(fused.size() == 2);
    REQUIRE(split.size() == 2);
    CHECK(split[1] > fused[1]);
    CHECK(split[0] > 0);
}

TEST_CASE("stage runner: the fault injection and a non-finite loss are runtime errors naming the stage") {
    TempDir dir;
    const std::string data = write_corpus(dir);
    TrainOptions o = tiny_run(data, "1f1b", 3, 3);
    o.fail_at_step = 2;
    o.fail_rank = 1;
    CHECK_THROWS_WITH_AS(run_pipeline(nb::make_pipeline_setup(nb::make_run_plan(o))),
                         doctest::Contains("stage 1: injected failure as step 2 begins"), nb::RuntimeError);
    TrainOptions nan = tiny_run(data, "2bw", 2, 2);
    nan.lr.lr = 1e30;
    CHECK_THROWS_WITH_AS(run_pipeline(nb::make_pipeline_setup(nb::make_run_plan(nan))), doctest::Contains("stage 1: loss is"),
                         nb::RuntimeError);
}

TEST_CASE("in-process transport: messages are copies, taken once, after their receive is posted") {
    nb::InProcessNetwork net(2);
    nb::Transport& a = net.endpoint(0);
    nb::Transport& b = net.endpoint(1);
    nb::Tensor t = nb::Tensor::zeros({2, 3});
    t.fill(1.5f);
    b.post_recv(0, {Channel::activation, 7}, {2, 3}, nb::DType::f32);
    CHECK_FALSE(b.try_take(0, {Channel::activation, 7}).has_value());
    a.send(1, {Channel::activation, 7}, t);
    t.fill(9.0f);  // the message is what was sent, not the sender's storage
    CHECK_THROWS_AS(a.send(1, {Channel::activation, 7}, t), std::logic_error);  // each tag goes once
    std::optional<nb::Tensor> got = b.try_take(0, {Channel::activation, 7});
    REQUIRE(got.has_value());
    CHECK(got->f32()[5] == 1.5f);
    CHECK_THROWS_AS(b.try_take(0, {Channel::activation, 7}), std::logic_error);  // no longer posted
    CHECK_THROWS_AS(b.try_take(0, {Channel::gradient, 7}), std::logic_error);    // never posted
    // A receive of the wrong shape is a logic error, not silent garbage.
    b.post_recv(0, {Channel::gradient, 1}, {3, 3}, nb::DType::f32);
    a.send(1, {Channel::gradient, 1}, nb::Tensor::zeros({2, 3}));
    CHECK_THROWS_AS(b.try_take(0, {Channel::gradient, 1}), std::logic_error);

    // The all-gather completes when every stage has contributed, for each of them.
    a.start_allgather({Channel::clip_sums, 0}, {1.0, 2.0}, {2, 1});
    CHECK_FALSE(a.try_take_allgather({Channel::clip_sums, 0}).has_value());
    b.start_allgather({Channel::clip_sums, 0}, {3.0}, {2, 1});
    const std::vector<std::vector<double>> want = {{1.0, 2.0}, {3.0}};
    CHECK(a.try_take_allgather({Channel::clip_sums, 0}) == want);
    CHECK(b.try_take_allgather({Channel::clip_sums, 0}) == want);
}

TEST_CASE("weight versions: a snapshot only while a later use needs it, dropped after its last use") {
    nb::CpuOps ops;
    nb::ParamLayout layout;
    layout.add({"w", {2}, nb::ParamKind::hidden_matrix});
    nb::TensorSet master = nb::TensorSet::zeros(layout);
    master[0].fill(1.0f);
    // pipedream on 2 stages, stage 0 (one step per microbatch, W_max(0, i-1) for microbatch i): F0 (W0), F1 (W0),
    // B0 (W0), step to W1, F2 (W1), B1 (W0, stashed), step to W2, B2 (W1), step to W3.
    const nb::ScheduleSpec spec{.kind = nb::ScheduleKind::pipedream, .stages = 2, .microbatches = 1, .steps = 3};
    nb::WeightVersions versions(ops, layout, master, nb::VersionUses(spec, 0, 0, false));
    versions.release(0);  // F0
    versions.release(0);  // F1
    versions.release(0);  // B0
    versions.before_update();
    master[0].fill(2.0f);  // the optimizer's update, in place
    versions.after_update(1);
    CHECK(versions.held() == 2);
    CHECK(versions.at(0)[0].f32()[0] == 1.0f);  // the stash kept W0 for B1
    CHECK(versions.at(1)[0].f32()[0] == 2.0f);
    versions.release(1);  // F2
    versions.release(0);  // B1: W0's last use
    CHECK(versions.held() == 1);
    CHECK_THROWS_WITH_AS(versions.at(0), "weight version W0 is not held (holds W1)", std::logic_error);
    versions.before_update();  // B2 still uses W1: a copy
    master[0].fill(3.0f);
    versions.after_update(2);
    CHECK(versions.held() == 2);
    versions.release(1);  // B2
    versions.before_update();  // no later use of W2: no copy
    versions.after_update(3);
    CHECK(versions.held() == 1);
    CHECK(versions.peak_held() == 2);
    CHECK_THROWS_AS(versions.release(1), std::logic_error);  // more uses than the schedule has
    CHECK_THROWS_AS(versions.release(0), std::logic_error);
}

// The up-front memory estimate (pipeline/stage/stage_memory.h) and what it reads: each part for a small model against
// what the stages really allocate, the schedule's weight versions and microbatches in flight, a checkpoint's
// bytes, the refusal's one line, byte formatting and /proc/meminfo's MemAvailable.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "model/partition.h"
#include "optim/optimizer_registry.h"
#include "optim/soap.h"
#include "optim/stage_optimizer.h"
#include "pipeline/schedule/pipeline_setup.h"
#include "pipeline/stage/stage_memory.h"
#include "pipeline/stage/stage_state.h"
#include "src/core/byte_size.h"
#include "src/core/error.h"
#include "src/core/host_memory.h"
#include "src/plan/run_plan.h"
#include "tests/unit/pipeline_test_util.h"

using namespace nb;
using namespace nb::test;

namespace {

// 5 blocks of hidden 64, untied: small enough to allocate every optimizer's state for real.
TrainOptions small_options(const std::string& schedule = "1f1b", int stages = 1, int64_t m = 4) {
    return pipeline_run("unused.txt", schedule, stages, m, 3, {5, 64, 96, 32});
}

ParamLayout layout_of(const TrainOptions& o, const StageSpec& spec) { return StageModel(o.model, spec).layout(); }

// The bytes an optimizer's (and delay fix's) state tensors really take once allocated.
int64_t allocated_state_bytes(StageOptimizer& optimizer) {
    int64_t bytes = 0;
    for (const auto& [name, tensor] : optimizer.state_tensors()) bytes += static_cast<int64_t>(tensor->bytes());
    return bytes;
}

}  // namespace

TEST_CASE("a stage's weights, gradients and AdamW state are 4, 4 and 8 bytes per parameter") {
    const TrainOptions o = small_options();
    const StageSpec whole = whole_model_spec(o.model);
    const ParamLayout layout = layout_of(o, whole);
    const int64_t params = layout.total_numel();
    REQUIRE(params == stage_param_count(o.model, whole));
    const StageMemory m = estimate_stage_memory(o, whole, layout, StageLoad{}, DType::f32);
    CHECK(m.weights_bytes == 4 * params);  // f32 master, no compute copy in f32
    CHECK(m.gradients_bytes == 4 * params);
    CHECK(m.optimizer_bytes == 2 * m.weights_bytes);
    CHECK(m.versions_bytes == 0);
    CHECK(m.activations_bytes == microbatch_stash_bytes(o.model, whole, o.micro_batch_size, o.seq_length).kept);
    CHECK(m.total_bytes() ==
          m.weights_bytes + m.versions_bytes + m.gradients_bytes + m.optimizer_bytes + m.activations_bytes);
    // What a StageState really allocates for its master weights, gradients and optimizer.
    StageState state(o, whole, Device::cpu);
    int64_t master = 0, grads = 0;
    for (const Tensor& t : state.master.tensors) master += static_cast<int64_t>(t.bytes());
    for (const Tensor& t : state.grads.tensors) grads += static_cast<int64_t>(t.bytes());
    CHECK(m.weights_bytes == master);
    CHECK(m.gradients_bytes == grads);
    CHECK(m.optimizer_bytes == allocated_state_bytes(state.optimizer));
}

TEST_CASE("every optimizer's state estimate equals what it allocates, on every stage of a cut, with every fix") {
    TrainOptions o = small_options();
    for (const std::string_view name : optimizer_names())
        for (const std::string_view fix : {"none", "ef", "taylor", "predict", "ef,predict", "lookahead"})
            for (const StageSpec& spec : partition_model(o.model, 3)) {
                CAPTURE(name);
                CAPTURE(fix);
                CAPTURE(spec.first_block);
                o.optimizer = OptimizerConfig{};
                o.optimizer.name = std::string(name);
                o.delay_fix = parse_delay_fixes(fix);
                const ParamLayout layout = layout_of(o, spec);
                StageOptimizer real(o.optimizer, o.delay_fix, layout, o.lr.lr, Device::cpu, o.model.moe.bias_update_rate);
                CHECK(stage_optimizer_state_bytes(o.optimizer, o.delay_fix, layout) == allocated_state_bytes(real));
                // ef's u_{t-1}, or predict's last update: one f32 buffer, shared when both are on.
                const int64_t ef = fix != "none" && fix != "taylor" ? 4 * layout.total_numel() : 0;
                CHECK(stage_optimizer_state_bytes(o.optimizer, o.delay_fix, layout) ==
                      optimizer_state_bytes(o.optimizer, layout) + ef);
            }
}

TEST_CASE("predict's estimate adds the prediction's compute copy to the weights and its last update to the state") {
    TrainOptions o = small_options();
    const StageSpec whole = whole_model_spec(o.model);
    const ParamLayout layout = layout_of(o, whole);
    const int64_t params = layout.total_numel();
    for (const DType dtype : {DType::f32, DType::bf16}) {
        CAPTURE(dtype_name(dtype));
        o.delay_fix = parse_delay_fixes("none");
        const StageMemory plain = estimate_stage_memory(o, whole, layout, StageLoad{2, 1}, dtype);
        o.delay_fix = parse_delay_fixes("predict");
        const StageMemory predicted = estimate_stage_memory(o, whole, layout, StageLoad{2, 1}, dtype);
        CHECK(predicted.weights_bytes - plain.weights_bytes == static_cast<int64_t>(dtype_bytes(dtype)) * params);
        CHECK(predicted.optimizer_bytes - plain.optimizer_bytes == 4 * params);
        CHECK(predicted.versions_bytes == plain.versions_bytes);
    }
}

TEST_CASE("SOAP's estimate leaves out the sides longer than max_precond_dim, as its constructor does") {
    const TrainOptions o = small_options();
    const ParamLayout layout = layout_of(o, whole_model_spec(o.model));
    for (const int64_t max_dim : {int64_t{10000}, int64_t{64}, int64_t{95}, int64_t{1}}) {
        CAPTURE(max_dim);
        SoapConfig cfg;
        cfg.max_precond_dim = max_dim;
        Soap soap(layout, cfg);
        int64_t bytes = 0;
        for (const auto& [name, tensor] : soap.state_tensors()) bytes += static_cast<int64_t>(tensor->bytes());
        CHECK(Soap::state_bytes(layout, cfg) == bytes);
    }
}

TEST_CASE("the schedule's weight versions and microbatches in flight come from its plan") {
    const int64_t m = 4;
    for (const char* schedule : {"gpipe", "1f1b", "2bw", "pipedream"}) {
        CAPTURE(schedule);
        const TrainOptions o = small_options(schedule, 2, std::string(schedule) == "pipedream" ? 1 : m);
        const PipelineSetup setup = make_pipeline_setup(make_run_plan(o));
        for (int s = 0; s < 2; ++s) {
            CAPTURE(s);
            const StageMemory mem = estimate_stage_memory(setup, s, DType::f32);
            const int64_t copy = 4 * setup.layouts[static_cast<size_t>(s)].total_numel();
            const int64_t stash = microbatch_stash_bytes(o.model, setup.cut[static_cast<size_t>(s)],
                                                         o.micro_batch_size, o.seq_length).kept;
            CHECK(mem.weights_bytes == copy);
            const std::vector<StagePlan> plans =
                virtual_stage_plans(build_schedule(setup.spec), setup.spec.placement());
            CHECK(mem.versions_bytes == (max_versions_held(plans, s) - 1) * copy);
            CHECK(mem.activations_bytes == max_in_flight(plans, s) * stash);
            const std::string kind = schedule;
            if (kind == "gpipe") CHECK(mem.activations_bytes == m * stash);
            if (kind == "gpipe" || kind == "1f1b") CHECK(mem.versions_bytes == 0);
            if (kind == "1f1b") CHECK(mem.activations_bytes == (2 - s) * stash);  // min(P - s, m)
            if (kind == "2bw") CHECK(mem.versions_bytes == copy);                  // one extra copy
            if (kind == "pipedream") CHECK(mem.versions_bytes == (2 - s - 1) * copy);  // p - s versions
        }
    }
}

TEST_CASE("a backend computing in bf16 adds a bf16 copy of the weights; its versions and stashes are bf16") {
    const TrainOptions o = small_options();
    const StageSpec whole = whole_model_spec(o.model);
    const ParamLayout layout = layout_of(o, whole);
    const int64_t params = layout.total_numel();
    const StageLoad load{2, 3};
    const StageMemory f32 = estimate_stage_memory(o, whole, layout, load, DType::f32);
    const StageMemory bf16 = estimate_stage_memory(o, whole, layout, load, DType::bf16);
    CHECK(bf16.weights_bytes == 6 * params);
    CHECK(bf16.versions_bytes == 2 * params);
    CHECK(f32.versions_bytes == 4 * params);
    CHECK(bf16.gradients_bytes == f32.gradients_bytes);
    CHECK(bf16.optimizer_bytes == f32.optimizer_bytes);
    CHECK(2 * bf16.activations_bytes == f32.activations_bytes);
    CHECK(f32.activations_bytes == 3 * microbatch_stash_bytes(o.model, whole, o.micro_batch_size, o.seq_length).kept);
}

TEST_CASE("estimate_cut_memory sums the stages of a cut, each with one version and one microbatch") {
    const TrainOptions o = small_options();
    const auto cut = partition_model(o.model, 3);
    StageMemory sum;
    for (const StageSpec& spec : cut) sum += estimate_stage_memory(o, spec, layout_of(o, spec), StageLoad{}, DType::f32);
    const StageMemory got = estimate_cut_memory(o, cut, DType::f32);
    CHECK(got.total_bytes() == sum.total_bytes());
    CHECK(got.weights_bytes == sum.weights_bytes);
    CHECK(got.activations_bytes == sum.activations_bytes);
}

TEST_CASE("estimate_checkpoint_bytes: each stage's carried tensors as allocated, plus its older versions") {
    // The tensors a stage file holds (pipeline/stage/stage_checkpoint.h): the state_tensors, then the older versions.
    const auto carried_bytes = [](const TrainOptions& o, const StageSpec& spec) {
        StageState state(o, spec, Device::cpu);
        int64_t bytes = 0;
        for (const auto& [name, tensor] : state.state_tensors()) bytes += static_cast<int64_t>(tensor->bytes());
        return bytes;
    };
    const TrainOptions o = small_options("2bw", 2);
    const auto cut = partition_model(o.model, 2);
    const int64_t carried = carried_bytes(o, cut[0]) + carried_bytes(o, cut[1]);
    CHECK(estimate_checkpoint_bytes(o, cut, DType::f32) == carried);
    // 2bw holds one older version per stage, in the compute dtype: 4 bytes a parameter in f32, 2 in bf16.
    const PipelineSetup setup = make_pipeline_setup(make_run_plan(o));
    const int64_t params = setup.layouts[0].total_numel() + setup.layouts[1].total_numel();
    CHECK(estimate_checkpoint_bytes(setup, DType::f32) == carried + 4 * params);
    CHECK(estimate_checkpoint_bytes(setup, DType::bf16) == carried + 2 * params);
}

TEST_CASE("require_memory_fits: one line naming the stages, the parts and what is available") {
    StageMemory need;
    need.weights_bytes = 300'000'000'000;
    need.gradients_bytes = 300'000'000'000;
    need.optimizer_bytes = 600'000'000'000;
    need.activations_bytes = 52'400'000;
    const AvailableMemory host{22'800'000'000, " of host memory is available (MemAvailable)"};
    CHECK(message_of<UsageError>([&] { require_memory_fits(0, 1, need, host); }) ==
          "stage 0 needs 1.20 TB (weights 300 GB, weight versions 0 B, gradients 300 GB, optimizer state 600 GB, "
          "activations 52.4 MB) but 22.8 GB of host memory is available (MemAvailable)");
    CHECK(message_of<UsageError>([&] { require_memory_fits(0, 3, need, host); }).starts_with("stages 0-2 need 1.20 TB"));
    CHECK(message_of<UsageError>([&] { require_memory_fits(2, 1, need, host); }).starts_with("stage 2 needs"));
    CHECK_NOTHROW(require_memory_fits(0, 1, need, std::nullopt));  // unknown: not refused
    CHECK_NOTHROW(require_memory_fits(0, 1, need, AvailableMemory{need.total_bytes(), ""}));
    CHECK_THROWS_AS(require_memory_fits(0, 1, need, AvailableMemory{need.total_bytes() - 1, ""}), UsageError);
}

TEST_CASE("format_bytes: decimal units, three significant digits") {
    CHECK(format_bytes(0) == "0 B");
    CHECK(format_bytes(999) == "999 B");
    CHECK(format_bytes(1000) == "1.00 kB");
    CHECK(format_bytes(52'400'000) == "52.4 MB");
    CHECK(format_bytes(315'000'000'000) == "315 GB");
    CHECK(format_bytes(999'700) == "1.00 MB");  // rounding carries into the next unit
    CHECK(format_bytes(1'210'000'000'000) == "1.21 TB");
    CHECK(format_bytes(-2'500) == "-2.50 kB");
}

TEST_CASE("MemAvailable is read from /proc/meminfo's text, in KiB") {
    const std::string meminfo = "MemTotal:       32768000 kB\nMemFree:         1000000 kB\n"
                                "MemAvailable:   23665192 kB\nBuffers:           10000 kB\n";
    CHECK(parse_mem_available_bytes(meminfo) == int64_t{23665192} * 1024);
    CHECK(parse_mem_available_bytes("MemAvailable: 4 kB\n") == 4096);
    CHECK_FALSE(parse_mem_available_bytes("MemTotal: 100 kB\nMemFree: 50 kB\n"));  // an old kernel: no line
    CHECK_FALSE(parse_mem_available_bytes("MemAvailable: lots\n"));
    CHECK_FALSE(parse_mem_available_bytes("XMemAvailable: 4 kB\n"));
    CHECK_FALSE(parse_mem_available_bytes("MemAvailable: 4 MB\n"));
    // This machine's own (Linux): some memory is available.
    const std::optional<int64_t> here = host_memory_available_bytes();
    REQUIRE(here);
    CHECK(*here > 0);
}

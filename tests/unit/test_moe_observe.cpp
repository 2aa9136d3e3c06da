// What MoE runs report about their layers (issue 12, deliverable 7): the expert load and aux loss counted from the
// blocks' dispatches (model/moe_load.h), their trip in a stage's report (pipeline/stage/stage_report.h), the progress
// line and metrics record (src/plan/train_progress.h), and the dispatch spans of --trace (pipeline/stage/stage_clock.h).
#include <doctest/doctest.h>

#include <random>
#include <vector>

#include "model/model_step.h"
#include "model/moe_load.h"
#include "model/stage_model.h"
#include "pipeline/stage/stage_clock.h"
#include "pipeline/stage/stage_report.h"
#include "pipeline/stage/trace.h"
#include "src/cpu/cpu_ops.h"
#include "src/plan/train_progress.h"
#include "tests/unit/fd_check.h"

using namespace nb;

namespace {

Tensor offsets_of(const std::vector<int32_t>& offsets) {
    Tensor t = Tensor::zeros({static_cast<int64_t>(offsets.size())}, DType::i32);
    for (size_t i = 0; i < offsets.size(); ++i) t.i32()[i] = offsets[i];
    return t;
}

Tensor scalar(float v) {
    Tensor t = Tensor::zeros({1});
    t.f32()[0] = v;
    return t;
}

}  // namespace

TEST_CASE("moe load: tokens per expert from the offsets, max over mean and idle experts") {
    CHECK(expert_tokens(offsets_of({0, 3, 3, 7, 8})) == std::vector<double>{3, 0, 4, 1});
    const LoadFigures f = load_figures({3, 0, 4, 1});
    CHECK(f.max_over_mean == doctest::Approx(2.0));  // 4 / (8 / 4)
    CHECK(f.idle_fraction == 0.25);
    CHECK(load_figures({2, 2, 2, 2}).max_over_mean == 1.0);
    CHECK(load_figures({0, 0, 8, 8}).max_over_mean == 2.0);  // every token to the same k = 2 of E = 4: E/k
    CHECK(load_figures({0, 0}).max_over_mean == 0.0);
}

TEST_CASE("moe load: the counter sums forwards per block in block order and ignores backwards") {
    MoeLoadCounter c;
    c.dispatch_begins(3, false);
    c.dispatch_ends(3, false, offsets_of({0, 2, 4}), scalar(0.25f));
    c.dispatch_ends(1, false, offsets_of({0, 4, 4}), scalar(0.5f));
    c.dispatch_ends(3, true, offsets_of({0, 4, 4}), Tensor{});  // a backward: the same routing again
    c.dispatch_ends(3, false, offsets_of({0, 1, 4}), scalar(0.125f));
    REQUIRE(c.blocks().size() == 2);
    CHECK(c.blocks()[0] == MoeBlockLoad{1, 0.5, {4, 0}});
    CHECK(c.blocks()[1] == MoeBlockLoad{3, 0.375, {3, 5}});
    CHECK_THROWS_AS(c.dispatch_ends(1, false, offsets_of({0, 1, 2, 4}), scalar(0)), std::logic_error);
}

TEST_CASE("moe load: the blocks of a model tell each training forward once, with every (token, slot) pair") {
    CpuOps ops;
    ModelConfig c = model_preset("tiny-moe");
    c.num_layers = 3;
    c.hidden_size = 32;
    c.ffn_hidden_size = 48;
    c.num_heads = 4;
    c.num_kv_heads = 2;
    c.moe.num_experts = 4;
    c.moe.ffn_hidden_size = 16;
    c.moe.shared_ffn_hidden_size = 0;
    c.moe.aux_loss_coeff = 0.1;
    c.moe_layers = "0,2";
    c.resolve_moe_layers();
    const StageModel model(c, whole_model_spec(c));
    const TensorSet weights = model.init_weights(5);
    TensorSet grads = TensorSet::zeros(model.layout());
    std::mt19937 rng(9);
    Microbatch mb;
    mb.batch_size = 2;
    mb.seq_len = 8;
    mb.tokens = test::rand_ids({mb.rows()}, static_cast<int32_t>(c.vocab_size), rng);
    mb.targets = test::rand_ids({mb.rows()}, static_cast<int32_t>(c.vocab_size), rng);

    MoeLoadCounter counter;
    const float loss = forward_backward(ops, model, weights, grads, mb, 1.0f, &counter);
    CHECK(forward_backward(ops, model, weights, grads, mb) == loss);  // telling changes nothing
    forward_backward(ops, model, weights, grads, mb, 1.0f, &counter);
    REQUIRE(counter.blocks().size() == 2);
    for (size_t i = 0; i < 2; ++i) {
        const MoeBlockLoad& b = counter.blocks()[i];
        CHECK(b.block == (i == 0 ? 0 : 2));
        double pairs = 0;
        for (const double t : b.expert_tokens) pairs += t;
        CHECK(pairs == 2.0 * static_cast<double>(mb.rows() * c.moe.topk));  // two forwards, N k pairs each
        CHECK(b.aux_loss_sum > 0);
    }
}

TEST_CASE("moe load: a stage report carries its MoE blocks and reads back") {
    StageReport r;
    r.iteration = 4;
    r.loss_sum = 7.5;
    r.moe = {{1, 0.03125, {3, 0, 5}}, {2, 0.5, {8, 0, 0}}};
    r.sum_squares = {1.5, 2.5, 3.5};
    const std::vector<double> v = r.to_values();
    CHECK(v.size() == StageReport::max_values(3, 2, 3));
    const StageReport back = StageReport::from_values(v);
    CHECK(back.iteration == 4);
    CHECK(back.loss_sum == 7.5);
    CHECK(back.moe == r.moe);
    CHECK(back.sum_squares == r.sum_squares);
    StageReport dense;
    dense.sum_squares = {1, 2};
    CHECK(StageReport::from_values(dense.to_values()).moe.empty());
    CHECK(StageReport::from_values(dense.to_values()).sum_squares == dense.sum_squares);
    std::vector<double> cut = v;
    cut.resize(StageReport::kHeader + 4);  // the second block's header missing
    CHECK_THROWS_AS(StageReport::from_values(cut), std::logic_error);
}

TEST_CASE("moe load: the progress line shows the aux loss and the most uneven layer, the record every layer") {
    IterationReport r{3, 10, 5.25, 1e-3, 0.5, 1234, 0.0123};
    const std::string dense = "step      3/10 | loss 5.2500 | lr 1.000e-03 | grad_norm 0.500 | 1234 tok/s | 12.3 ms";
    CHECK(progress_line(r) == dense);
    CHECK(to_json_line(metrics_record(r)) ==
          R"({"step": 3, "loss": 5.25, "lr": 0.001, "grad_norm": 0.5, "tokens_per_s": 1234})");
    r.moe = moe_layer_figures({{1, 0.0625, {4, 4, 0, 0}}, {3, 0.125, {5, 1, 1, 1}}, {5, 0.25, {6, 1, 1, 0}}}, 2);
    CHECK(progress_line(r) == "step      3/10 | loss 5.2500 | lr 1.000e-03 | grad_norm 0.500 | aux 0.2188 "
                              "load max/mean 3.00 (L5) idle 0.25 | 1234 tok/s | 12.3 ms");
    CHECK(to_json_line(metrics_record(r)) ==
          R"({"step": 3, "loss": 5.25, "aux_loss": 0.21875, "lr": 0.001, "grad_norm": 0.5, "tokens_per_s": 1234, )"
          R"("moe_layers": [1, 3, 5], "moe_aux_loss": [0.03125, 0.0625, 0.125], )"
          R"("moe_load_max_over_mean": [2, 2.5, 3], "moe_idle_fraction": [0.5, 0, 0.25]})");
    r.moe[2].load_max_over_mean = 2.5;  // a tie: the lower block
    CHECK(progress_line(r).find("load max/mean 2.50 (L3) idle 0.00") != std::string::npos);
}

TEST_CASE("moe load: a dispatch span travels as doubles and becomes a trace event with its layer and load") {
    TimedTask t{TaskKind::moe_backward, 7, 2, 1000, 500};
    t.block = 3;
    t.load_max_over_mean = 1.75;
    t.idle_fraction = 0.125;
    const std::vector<TimedTask> back = decode_timed_tasks(encode_timed_tasks({t}));
    REQUIRE(back.size() == 1);
    CHECK(back[0].block == 3);
    CHECK(back[0].load_max_over_mean == 1.75);
    CHECK(back[0].idle_fraction == 0.125);
    CHECK_FALSE(is_compute(TaskKind::moe_forward));  // inside a forward: its time is the forward's already
    const TraceEvent e = to_trace_event(back[0], 1);
    CHECK(e.name == "moe L3 B7");
    CHECK(e.category == "moe");
    CHECK(e.microbatch == 7);
    TraceRecorder rec;
    rec.add(e);
    CHECK(rec.to_chrome_json(2).find(R"("name": "moe L3 B7", "cat": "moe", "ts": 1.000, "dur": 0.500, "args": )"
                                     R"({"microbatch": 7, "version": 2, "layer": 3, "load_max_over_mean": 1.75, )"
                                     R"("idle_fraction": 0.125}})") != std::string::npos);
}

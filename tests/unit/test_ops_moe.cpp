// The MoE ops (src/ops/ops.h, src/cpu/moe_*.cpp): top-k selection and its tie rule, the expert bias (selects, never
// weighs), renormalised gates, the dispatch plan's offsets and stable order, and every backward against finite
// differences. The whole layer is checked in tests/unit/test_layers_fd.cpp and against torch in
// tests/oracle/test_moe_layer.py.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <vector>

#include "src/cpu/cpu_ops.h"
#include "tests/unit/fd_check.h"

using namespace nb;
using namespace nb::test;

namespace {

Tensor from_floats(const Shape& shape, const std::vector<float>& values) {
    Tensor t = Tensor::zeros(shape);
    REQUIRE(static_cast<int64_t>(values.size()) == t.numel());
    std::copy(values.begin(), values.end(), t.f32());
    return t;
}

Tensor from_ints(const Shape& shape, const std::vector<int32_t>& values) {
    Tensor t = Tensor::zeros(shape, DType::i32);
    REQUIRE(static_cast<int64_t>(values.size()) == t.numel());
    std::copy(values.begin(), values.end(), t.i32());
    return t;
}

std::vector<int32_t> ints(const Tensor& t) { return {t.i32(), t.i32() + t.numel()}; }

struct Routed {
    Tensor probs, expert, gate;
};

Routed route(CpuOps& ops, const Tensor& logits, int64_t k, const Tensor& bias = {}, bool renorm = false) {
    const int64_t n = logits.dim(0), e = logits.dim(1);
    Routed r{Tensor::zeros({n, e}), Tensor::zeros({n, k}, DType::i32), Tensor::zeros({n, k})};
    ops.moe_router_forward(r.probs, r.expert, r.gate, logits, bias, renorm);
    return r;
}

// Logits whose values in each row are a shuffle of 0, 0.5, 1, ... plus a little noise: no two scores come within
// a finite-difference step of each other, so perturbing one never changes which experts are chosen.
Tensor separated_logits(int64_t n, int64_t e, std::mt19937& rng) {
    Tensor t = randn({n, e}, rng, 0.05f);
    std::vector<int> order(static_cast<size_t>(e));
    for (int64_t row = 0; row < n; ++row) {
        std::iota(order.begin(), order.end(), 0);
        std::shuffle(order.begin(), order.end(), rng);
        for (int64_t i = 0; i < e; ++i) t.f32()[row * e + i] += 0.5f * order[static_cast<size_t>(i)];
    }
    return t;
}

}  // namespace

TEST_CASE("moe_router_forward: softmax, best first, ties to the lower expert index") {
    CpuOps ops;
    // Row 0: all equal, the first k win. Row 1: 1 and 2 tie for the top. Row 2: 1, 2, 3 tie behind 0.
    const Tensor logits = from_floats({3, 4}, {0, 0, 0, 0, /**/ 1, 3, 3, 0, /**/ 3, 1, 1, 1});
    const Routed r = route(ops, logits, 2);
    CHECK(ints(r.expert) == std::vector<int32_t>{0, 1, /**/ 1, 2, /**/ 0, 1});
    for (int64_t n = 0; n < 3; ++n) {
        double total = 0.0, want_total = 0.0, zmax = -1e30;
        for (int64_t i = 0; i < 4; ++i) zmax = std::max(zmax, double(logits.f32()[n * 4 + i]));
        for (int64_t i = 0; i < 4; ++i) want_total += std::exp(logits.f32()[n * 4 + i] - zmax);
        for (int64_t i = 0; i < 4; ++i) {
            const double want = std::exp(logits.f32()[n * 4 + i] - zmax) / want_total;
            CHECK(r.probs.f32()[n * 4 + i] == doctest::Approx(want).epsilon(1e-6));
            total += r.probs.f32()[n * 4 + i];
        }
        CHECK(total == doctest::Approx(1.0).epsilon(1e-6));
        for (int64_t j = 0; j < 2; ++j)  // without renorm a gate is its expert's probability, bit for bit
            CHECK(r.gate.f32()[n * 2 + j] == r.probs.f32()[n * 4 + r.expert.i32()[n * 2 + j]]);
    }
    // k = 1 and k = E keep the same order rule.
    CHECK(ints(route(ops, logits, 1).expert) == std::vector<int32_t>{0, 1, 0});
    CHECK(ints(route(ops, logits, 4).expert) == std::vector<int32_t>{0, 1, 2, 3, 1, 2, 0, 3, 0, 1, 2, 3});
}

TEST_CASE("moe_router_forward: the expert bias selects, the gates stay the probabilities") {
    CpuOps ops;
    const Tensor logits = from_floats({2, 4}, {2, 0, 0, 0, /**/ 0, 0, 1, 0});
    const Tensor bias = from_floats({4}, {0.0f, 0.0f, 0.0f, 1.0f});
    const Routed r = route(ops, logits, 2, bias);
    // Row 0: p = (.71, .10, .10, .10); scores (.71, .10, .10, 1.10): expert 3 first, then 0.
    CHECK(ints(r.expert) == std::vector<int32_t>{3, 0, /**/ 3, 2});
    CHECK(r.gate.f32()[0] == r.probs.f32()[3]);
    CHECK(r.gate.f32()[1] == r.probs.f32()[0]);
    CHECK(r.gate.f32()[0] < 0.2f);
    // A bias that ties two scores: the lower index still wins.
    const Tensor tie_logits = from_floats({1, 3}, {0, 0, 0});
    const Tensor tie_bias = from_floats({3}, {0.0f, 0.5f, 0.5f});
    CHECK(ints(route(ops, tie_logits, 1, tie_bias).expert) == std::vector<int32_t>{1});
}

TEST_CASE("moe_router_forward: renormalised gates sum to one in the chosen order") {
    CpuOps ops;
    std::mt19937 rng(121);
    const Tensor logits = randn({5, 6}, rng, 2.0f);
    const Routed plain = route(ops, logits, 3), renorm = route(ops, logits, 3, {}, true);
    CHECK(ints(plain.expert) == ints(renorm.expert));
    for (int64_t n = 0; n < 5; ++n) {
        double s = 0.0, sum_plain = 0.0;
        for (int64_t j = 0; j < 3; ++j) sum_plain += plain.gate.f32()[n * 3 + j];
        for (int64_t j = 0; j < 3; ++j) {
            s += renorm.gate.f32()[n * 3 + j];
            CHECK(renorm.gate.f32()[n * 3 + j] == doctest::Approx(plain.gate.f32()[n * 3 + j] / sum_plain));
        }
        CHECK(s == doctest::Approx(1.0).epsilon(1e-6));
        CHECK(plain.gate.f32()[n * 3] >= plain.gate.f32()[n * 3 + 1]);  // best first
    }
}

TEST_CASE("moe_dispatch_plan: offsets are prefix sums of the loads, rows stable by (expert, token)") {
    CpuOps ops;
    // 4 tokens, k = 2, E = 5; expert 4 receives nothing.
    const Tensor experts = from_ints({4, 2}, {2, 0, /**/ 0, 1, /**/ 2, 3, /**/ 0, 2});
    Tensor pair_of_row = Tensor::zeros({8}, DType::i32), row_of_pair = Tensor::zeros({8}, DType::i32);
    Tensor offsets = Tensor::zeros({6}, DType::i32);
    ops.moe_dispatch_plan(pair_of_row, row_of_pair, offsets, experts);
    CHECK(ints(offsets) == std::vector<int32_t>{0, 3, 4, 7, 8, 8});
    // Expert 0: pairs 1 (token 0), 2 (token 1), 6 (token 3); expert 1: pair 3; expert 2: 0, 4, 7; expert 3: 5.
    CHECK(ints(pair_of_row) == std::vector<int32_t>{1, 2, 6, 3, 0, 4, 7, 5});
    for (int32_t r = 0; r < 8; ++r) CHECK(row_of_pair.i32()[pair_of_row.i32()[r]] == r);

    // One expert taking every token: a single range; k = E: every expert takes every token, in token order.
    const Tensor all_one = from_ints({3, 1}, {1, 1, 1});
    Tensor p3 = Tensor::zeros({3}, DType::i32), r3 = Tensor::zeros({3}, DType::i32);
    Tensor o3 = Tensor::zeros({4}, DType::i32);
    ops.moe_dispatch_plan(p3, r3, o3, all_one);
    CHECK(ints(o3) == std::vector<int32_t>{0, 0, 3, 3});
    CHECK(ints(p3) == std::vector<int32_t>{0, 1, 2});
    const Tensor k_is_e = from_ints({2, 2}, {1, 0, /**/ 0, 1});
    Tensor p4 = Tensor::zeros({4}, DType::i32), r4 = Tensor::zeros({4}, DType::i32);
    Tensor o4 = Tensor::zeros({3}, DType::i32);
    ops.moe_dispatch_plan(p4, r4, o4, k_is_e);
    CHECK(ints(o4) == std::vector<int32_t>{0, 2, 4});
    CHECK(ints(p4) == std::vector<int32_t>{1, 2, 0, 3});

    const Tensor bad = from_ints({1, 2}, {0, 5});
    Tensor pb = Tensor::zeros({2}, DType::i32), rb = Tensor::zeros({2}, DType::i32);
    Tensor ob = Tensor::zeros({6}, DType::i32);
    CHECK_THROWS_AS(ops.moe_dispatch_plan(pb, rb, ob, bad), std::invalid_argument);
    Tensor short_offsets = Tensor::zeros({2}, DType::i32);  // E = 1 < k = 2
    CHECK_THROWS_AS(ops.moe_dispatch_plan(pb, rb, short_offsets, bad), std::invalid_argument);
}

TEST_CASE("moe_router_backward matches finite differences (plain and renormalised gates, with dprobs)") {
    for (bool renorm : {false, true}) {
        CAPTURE(renorm);
        CpuOps ops;
        std::mt19937 rng(renorm ? 123 : 122);
        const int64_t n = 5, e = 6, k = 3;
        Tensor logits = separated_logits(n, e, rng);
        const Tensor bias = randn({e}, rng, 0.01f);
        const Tensor Rg = randn({n, k}, rng), Rp = randn({n, e}, rng);
        const Routed r = route(ops, logits, k, bias, renorm);
        Tensor dlogits = Tensor::zeros({n, e});
        ops.moe_router_backward(dlogits, Rp, Rg, r.probs, r.expert, r.gate, renorm);
        auto objective = [&] {
            const Routed again = route(ops, logits, k, bias, renorm);
            REQUIRE(ints(again.expert) == ints(r.expert));  // the step never changes the selection
            return dot(again.gate, Rg) + dot(again.probs, Rp);
        };
        fd_check("logits", logits, dlogits, objective, rng, {.h = 1e-2, .tol = 1e-3});
    }
}

TEST_CASE("moe_aux_loss: forward is coeff E sum f_i P_i, backward its gradient in the probabilities") {
    CpuOps ops;
    std::mt19937 rng(124);
    const int64_t n = 4, e = 3;
    const Routed r = route(ops, randn({n, e}, rng), 2);
    Tensor probs = r.probs.clone();
    const Tensor offsets = from_ints({e + 1}, {0, 3, 3, 8});  // loads 3, 0, 5 of R = 8
    Tensor loss = Tensor::zeros({1});
    ops.moe_aux_loss_forward(loss, probs, offsets, 0.25f);
    double want = 0.0;
    const double f[3] = {3.0 / 8, 0.0, 5.0 / 8};
    for (int64_t i = 0; i < e; ++i) {
        double mean_p = 0.0;
        for (int64_t t = 0; t < n; ++t) mean_p += probs.f32()[t * e + i];
        want += f[i] * mean_p / n;
    }
    CHECK(loss.f32()[0] == doctest::Approx(0.25 * e * want).epsilon(1e-6));

    Tensor dprobs = Tensor::zeros({n, e});
    ops.moe_aux_loss_backward(dprobs, offsets, 0.25f, 2.0f);
    auto objective = [&] {
        Tensor l = Tensor::zeros({1});
        ops.moe_aux_loss_forward(l, probs, offsets, 0.25f);
        return 2.0 * l.f32()[0];
    };
    // The loss is linear in the probabilities: the difference quotient is exact up to rounding.
    FdOptions opt{.h = 1e-1, .tol = 1e-4};
    const FdResult res = fd_compare(probs, dprobs, objective, rng, opt);
    CHECK(res.failures == 0);
    CHECK(dprobs.f32()[1] == 0.0f);  // expert 1 received nothing: its f is 0
}

TEST_CASE("moe permute, grouped linear and combine backwards match finite differences") {
    CpuOps ops;
    std::mt19937 rng(125);
    const int64_t n = 5, e = 4, k = 2, d = 6, out_dim = 7;
    // Expert 3 gets no pair; expert 0 gets most.
    const Tensor experts = from_ints({n, k}, {0, 1, /**/ 2, 0, /**/ 0, 2, /**/ 1, 0, /**/ 0, 2});
    const int64_t R = n * k;
    Tensor pair_of_row = Tensor::zeros({R}, DType::i32), row_of_pair = Tensor::zeros({R}, DType::i32);
    Tensor offsets = Tensor::zeros({e + 1}, DType::i32);
    ops.moe_dispatch_plan(pair_of_row, row_of_pair, offsets, experts);
    REQUIRE(ints(offsets) == std::vector<int32_t>{0, 5, 7, 10, 10});

    SUBCASE("permute") {
        Tensor x = randn({n, d}, rng);
        const Tensor Rp = randn({R, d}, rng);
        Tensor dx = Tensor::zeros({n, d});
        ops.moe_permute_backward(dx, Rp, row_of_pair);
        const auto objective = dot_objective(Rp, [&](Tensor& xp) { ops.moe_permute_forward(xp, x, pair_of_row); });
        fd_check("x", x, dx, objective, rng, {.h = 1e-2, .tol = 1e-4});
    }
    SUBCASE("grouped linear") {
        Tensor x = randn({R, d}, rng);
        std::vector<Tensor> w, dw;
        for (int64_t i = 0; i < e; ++i) {
            w.push_back(randn({out_dim, d}, rng));
            dw.push_back(Tensor::zeros({out_dim, d}));
        }
        std::vector<const Tensor*> wp;
        std::vector<Tensor*> dwp;
        for (int64_t i = 0; i < e; ++i) {
            wp.push_back(&w[static_cast<size_t>(i)]);
            dwp.push_back(&dw[static_cast<size_t>(i)]);
        }
        const Tensor Ry = randn({R, out_dim}, rng);
        Tensor dx = Tensor::zeros({R, d});
        ops.moe_grouped_linear_backward(dx, dwp, Ry, x, wp, offsets);
        const auto objective =
            dot_objective(Ry, [&](Tensor& y) { ops.moe_grouped_linear_forward(y, x, wp, offsets); });
        // Rows of expert e are x W_e^T exactly as linear_forward computes them on its own.
        Tensor y = Tensor::zeros({R, out_dim});
        ops.moe_grouped_linear_forward(y, x, wp, offsets);
        for (int64_t i = 0; i < 3; ++i) {
            const int64_t b = offsets.i32()[i], end = offsets.i32()[i + 1];
            Tensor alone = Tensor::zeros({end - b, out_dim});
            ops.linear_forward(alone, x.rows(b, end), w[static_cast<size_t>(i)]);
            CHECK(bitwise_equal(alone, y.rows(b, end)));
        }
        fd_check("x", x, dx, objective, rng, {.h = 1e-2, .tol = 1e-3});
        for (int64_t i = 0; i < 3; ++i) fd_check("w", w[static_cast<size_t>(i)], dw[static_cast<size_t>(i)],
                                                 objective, rng, {.h = 1e-2, .tol = 1e-3});
        CHECK(std::all_of(dw[3].f32(), dw[3].f32() + dw[3].numel(), [](float v) { return v == 0.0f; }));
    }
    SUBCASE("combine") {
        Tensor expert_out = randn({R, d}, rng), gate = randn({n, k}, rng);
        const Tensor Ry = randn({n, d}, rng);
        Tensor dexpert = Tensor::zeros({R, d}), dgate = Tensor::zeros({n, k});
        ops.moe_combine_backward(dexpert, dgate, Ry, expert_out, gate, row_of_pair);
        const auto objective =
            dot_objective(Ry, [&](Tensor& y) { ops.moe_combine_forward(y, expert_out, gate, row_of_pair); });
        fd_check("expert_out", expert_out, dexpert, objective, rng, {.h = 1e-2, .tol = 1e-3});
        fd_check("gate", gate, dgate, objective, rng, {.h = 1e-2, .tol = 1e-3});
    }
}

TEST_CASE("moe ops reject impossible shapes") {
    CpuOps ops;
    Tensor probs = Tensor::zeros({2, 3}), expert = Tensor::zeros({2, 4}, DType::i32), gate = Tensor::zeros({2, 4});
    CHECK_THROWS_AS(ops.moe_router_forward(probs, expert, gate, Tensor::zeros({2, 3}), Tensor{}, false),
                    std::invalid_argument);  // k = 4 > E = 3
    Tensor e2 = Tensor::zeros({2, 2}, DType::i32), g2 = Tensor::zeros({2, 2});
    CHECK_THROWS_AS(ops.moe_router_forward(probs, e2, g2, Tensor::zeros({2, 3}), Tensor::zeros({4}), false),
                    std::invalid_argument);  // bias of the wrong size
    Tensor y = Tensor::zeros({4, 5});
    const Tensor w0 = Tensor::zeros({5, 3});
    CHECK_THROWS_AS(ops.moe_grouped_linear_forward(y, Tensor::zeros({4, 3}), {&w0}, Tensor::zeros({3}, DType::i32)),
                    std::invalid_argument);  // 1 weight for E = 2
    CHECK_THROWS_AS(ops.moe_grouped_linear_forward(y, Tensor::zeros({4, 3}), {&w0}, from_ints({2}, {0, 3})),
                    std::invalid_argument);  // the offsets cover 3 of 4 rows
}

TEST_CASE("moe_expert_load_accumulate adds each expert's pairs; moe_expert_bias_update follows the sign rule") {
    CpuOps ops;
    Tensor load = Tensor::zeros({4});
    ops.moe_expert_load_accumulate(load, from_ints({5}, {0, 3, 4, 6, 8}));  // loads 3 1 2 2
    ops.moe_expert_load_accumulate(load, from_ints({5}, {0, 3, 4, 6, 8}));
    CHECK(std::vector<float>(load.f32(), load.f32() + 4) == std::vector<float>{6, 2, 4, 4});
    Tensor bias = from_floats({4}, {0.5f, -0.25f, 0.125f, -0.0f});
    ops.moe_expert_bias_update(bias, load, 0.25f);  // mean 4: over, under, on, on
    CHECK(bias.f32()[0] == 0.25f);
    CHECK(bias.f32()[1] == 0.0f);
    CHECK(bias.f32()[2] == 0.125f);  // sign 0: exactly as it was, even -0
    CHECK(std::signbit(bias.f32()[3]));
    CHECK_THROWS_AS(ops.moe_expert_bias_update(bias, Tensor::zeros({3}), 0.1f), std::invalid_argument);
    CHECK_THROWS_AS(ops.moe_expert_load_accumulate(load, from_ints({4}, {0, 1, 2, 3})), std::invalid_argument);
}

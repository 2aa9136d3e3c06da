// cross_entropy_forward / cross_entropy_backward: loss[n] = lse[n] - logits[n, target[n]].
#include <doctest/doctest.h>

#include <cmath>
#include <stdexcept>
#include <vector>

#include "src/cpu/cpu_ops.h"
#include "tests/unit/fd_check.h"

using namespace nb;
using namespace nb::test;

TEST_CASE("cross_entropy_forward matches a double-precision loop, also for large logits") {
    CpuOps ops;
    std::mt19937 rng(61);
    const int64_t N = 8, V = 11;
    for (float offset : {0.0f, 1e4f}) {
        CAPTURE(offset);
        Tensor logits = randn({2, 4, V}, rng, 3.0f), targets = rand_ids({2, 4}, V, rng);
        for (int64_t i = 0; i < logits.numel(); ++i) logits.f32()[i] += offset;
        Tensor loss = Tensor::zeros({N}), lse = Tensor::zeros({N});
        ops.cross_entropy_forward(loss, lse, logits, targets);
        std::vector<double> want_loss(static_cast<size_t>(N)), want_lse(static_cast<size_t>(N));
        for (int64_t n = 0; n < N; ++n) {
            const float* row = logits.f32() + n * V;
            double mx = row[0], z = 0.0;
            for (int64_t j = 0; j < V; ++j) mx = std::max(mx, static_cast<double>(row[j]));
            for (int64_t j = 0; j < V; ++j) z += std::exp(row[j] - mx);
            want_lse[static_cast<size_t>(n)] = mx + std::log(z);
            want_loss[static_cast<size_t>(n)] = want_lse[static_cast<size_t>(n)] - row[targets.i32()[n]];
        }
        // The loss is a difference of two numbers near `offset`: compare it absolutely at float spacing there.
        CHECK(max_rel_diff(lse, want_lse) < 1e-6);
        for (int64_t n = 0; n < N; ++n)
            CHECK(std::fabs(loss.f32()[n] - want_loss[static_cast<size_t>(n)]) < 1e-6 * std::max(1.0f, offset));
    }
}

TEST_CASE("cross_entropy_backward matches finite differences through dloss") {
    CpuOps ops;
    std::mt19937 rng(62);
    const int64_t N = 6, V = 11;
    Tensor logits = randn({N, V}, rng, 2.0f), targets = rand_ids({N}, V, rng);
    const float dloss = 3.0f / N;  // a mean scaled by 3: a missing dloss shows
    Tensor loss = Tensor::zeros({N}), lse = Tensor::zeros({N});
    ops.cross_entropy_forward(loss, lse, logits, targets);
    Tensor dlogits = Tensor::zeros({N, V});
    ops.cross_entropy_backward(dlogits, logits, lse, targets, dloss);
    auto objective = [&] {
        Tensor l = Tensor::zeros({N}), s = Tensor::zeros({N});
        ops.cross_entropy_forward(l, s, logits, targets);
        double total = 0.0;
        for (int64_t n = 0; n < N; ++n) total += l.f32()[n];
        return dloss * total;
    };
    // The loss rows are only float-accurate (~1e-7 of lse), which the 2h step amplifies: use a larger h.
    fd_check("logits", logits, dlogits, objective, rng, {.h = 2e-2, .tol = 2e-3});

    // Each row of the gradient sums to zero (softmax minus a one-hot), and backward accumulates.
    for (int64_t n = 0; n < N; ++n) {
        double s = 0.0;
        for (int64_t j = 0; j < V; ++j) s += dlogits.f32()[n * V + j];
        CHECK(std::fabs(s) < 1e-6);
    }
    Tensor twice = dlogits.clone();
    ops.cross_entropy_backward(twice, logits, lse, targets, dloss);
    ops.scale_inplace(dlogits, 2.0f);
    CHECK(bitwise_equal(twice, dlogits));
}

TEST_CASE("cross_entropy rejects out-of-range targets and bad shapes") {
    CpuOps ops;
    Tensor logits = Tensor::zeros({3, 5}), targets = Tensor::zeros({3}, DType::i32);
    Tensor loss = Tensor::zeros({3}), lse = Tensor::zeros({3});
    targets.i32()[1] = 5;
    CHECK_THROWS_AS(ops.cross_entropy_forward(loss, lse, logits, targets), std::out_of_range);
    targets.i32()[1] = -100;
    Tensor dlogits = Tensor::zeros({3, 5});
    CHECK_THROWS_AS(ops.cross_entropy_backward(dlogits, logits, lse, targets, 1.0f), std::out_of_range);
    targets.i32()[1] = 0;
    Tensor short_targets = Tensor::zeros({2}, DType::i32), bad_loss = Tensor::zeros({4});
    CHECK_THROWS_AS(ops.cross_entropy_forward(loss, lse, logits, short_targets), std::invalid_argument);
    CHECK_THROWS_AS(ops.cross_entropy_forward(bad_loss, lse, logits, targets), std::invalid_argument);
}

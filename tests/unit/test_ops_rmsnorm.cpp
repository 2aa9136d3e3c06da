// rmsnorm_forward / rmsnorm_backward: y = x * rstd * gain, rstd = 1/sqrt(mean(x^2) + eps).
#include <doctest/doctest.h>

#include <cmath>
#include <stdexcept>
#include <vector>

#include "src/cpu/cpu_ops.h"
#include "tests/unit/fd_check.h"

using namespace nb;
using namespace nb::test;

TEST_CASE("rmsnorm_forward matches a double-precision loop") {
    CpuOps ops;
    std::mt19937 rng(21);
    const int64_t N = 9, d = 24;
    const float eps = 1e-5f;
    Tensor x = randn({3, 3, d}, rng, 2.0f), gain = randn({d}, rng);
    Tensor y = Tensor::zeros({3, 3, d}), rstd = Tensor::zeros({N});
    ops.rmsnorm_forward(y, rstd, x, gain, eps);
    std::vector<double> want_y(static_cast<size_t>(N * d)), want_rstd(static_cast<size_t>(N));
    for (int64_t n = 0; n < N; ++n) {
        double ss = 0.0;
        for (int64_t j = 0; j < d; ++j) ss += std::pow(static_cast<double>(x.f32()[n * d + j]), 2);
        const double r = 1.0 / std::sqrt(ss / d + eps);
        want_rstd[static_cast<size_t>(n)] = r;
        for (int64_t j = 0; j < d; ++j) want_y[static_cast<size_t>(n * d + j)] = x.f32()[n * d + j] * r * gain.f32()[j];
    }
    CHECK(max_rel_diff(y, want_y) < 1e-6);
    CHECK(max_rel_diff(rstd, want_rstd) < 1e-6);
}

TEST_CASE("rmsnorm_backward matches finite differences") {
    CpuOps ops;
    std::mt19937 rng(22);
    const int64_t N = 5, d = 16;
    const float eps = 1e-5f;
    Tensor x = randn({N, d}, rng), gain = randn({d}, rng), R = randn({N, d}, rng);
    Tensor y = Tensor::zeros({N, d}), rstd = Tensor::zeros({N});
    ops.rmsnorm_forward(y, rstd, x, gain, eps);
    Tensor dx = Tensor::zeros({N, d}), dgain = Tensor::zeros({d});
    ops.rmsnorm_backward(dx, dgain, R, x, gain, rstd);
    const auto objective = dot_objective(R, [&](Tensor& y2) {
        Tensor r2 = Tensor::zeros({N});
        ops.rmsnorm_forward(y2, r2, x, gain, eps);
    });
    fd_check("x", x, dx, objective, rng, {.h = 1e-2, .tol = 2e-3});
    fd_check("gain", gain, dgain, objective, rng, {.h = 1e-2, .tol = 1e-3});
}

TEST_CASE("rmsnorm_backward accumulates into dx and dgain") {
    CpuOps ops;
    std::mt19937 rng(23);
    const int64_t N = 6, d = 10;
    Tensor x = randn({N, d}, rng), gain = randn({d}, rng), dy = randn({N, d}, rng);
    Tensor y = Tensor::zeros({N, d}), rstd = Tensor::zeros({N});
    ops.rmsnorm_forward(y, rstd, x, gain, 1e-6f);
    Tensor gx = Tensor::zeros({N, d}), gg = Tensor::zeros({d});
    ops.rmsnorm_backward(gx, gg, dy, x, gain, rstd);
    Tensor dx = Tensor::zeros({N, d}), dg = Tensor::zeros({d});
    ops.rmsnorm_backward(dx, dg, dy, x, gain, rstd);
    ops.rmsnorm_backward(dx, dg, dy, x, gain, rstd);
    ops.scale_inplace(gx, 2.0f);
    ops.scale_inplace(gg, 2.0f);
    CHECK(bitwise_equal(dx, gx));  // 0 + a + a == 2a exactly
    CHECK(bitwise_equal(dg, gg));
}

TEST_CASE("rmsnorm rejects mismatched shapes") {
    CpuOps ops;
    Tensor x = Tensor::zeros({4, 8}), gain = Tensor::zeros({8}), y = Tensor::zeros({4, 8}), rstd = Tensor::zeros({4});
    Tensor bad_gain = Tensor::zeros({7}), bad_rstd = Tensor::zeros({3});
    CHECK_THROWS_AS(ops.rmsnorm_forward(y, rstd, x, bad_gain, 1e-5f), std::invalid_argument);
    CHECK_THROWS_AS(ops.rmsnorm_forward(y, bad_rstd, x, gain, 1e-5f), std::invalid_argument);
    Tensor dx = Tensor::zeros({4, 8}), bad_dgain = Tensor::zeros({4});
    CHECK_THROWS_AS(ops.rmsnorm_backward(dx, bad_dgain, y, x, gain, rstd), std::invalid_argument);
}

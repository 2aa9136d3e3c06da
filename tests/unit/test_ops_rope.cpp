// rope_forward / rope_backward: rotate-half RoPE on [N, heads, head_dim], pos = n % seq_len.
#include <doctest/doctest.h>

#include <cmath>
#include <stdexcept>
#include <vector>

#include "src/cpu/cpu_ops.h"
#include "tests/unit/fd_check.h"

using namespace nb;
using namespace nb::test;

namespace {

// The definition, in double.
std::vector<double> naive_rope(const Tensor& x, int64_t seq_len, double theta) {
    const int64_t N = x.dim(0), heads = x.dim(1), hd = x.dim(2), half = hd / 2;
    std::vector<double> out(static_cast<size_t>(x.numel()));
    for (int64_t n = 0; n < N; ++n)
        for (int64_t h = 0; h < heads; ++h)
            for (int64_t i = 0; i < half; ++i) {
                const double angle = static_cast<double>(n % seq_len) * std::pow(theta, -2.0 * i / hd);
                const int64_t base = (n * heads + h) * hd;
                const double a = x.f32()[base + i], b = x.f32()[base + i + half];
                out[static_cast<size_t>(base + i)] = a * std::cos(angle) - b * std::sin(angle);
                out[static_cast<size_t>(base + i + half)] = b * std::cos(angle) + a * std::sin(angle);
            }
    return out;
}

}  // namespace

TEST_CASE("rope_forward matches the definition (rotate-half, pos = n % seq_len)") {
    CpuOps ops;
    std::mt19937 rng(31);
    const int64_t B = 2, T = 37, heads = 3, hd = 16;
    Tensor x = randn({B * T, heads, hd}, rng), out = Tensor::zeros({B * T, heads, hd});
    ops.rope_forward(out, x, T, 10000.0f);
    // Angles up to 36 rad; float cos/sin of a double angle are within ~1 ulp of the true values.
    CHECK(max_rel_diff(out, naive_rope(x, T, 10000.0)) < 1e-6);
    // Position 0 (rows 0 and T) is the identity.
    for (int64_t j = 0; j < heads * hd; ++j) {
        CHECK(out.f32()[j] == x.f32()[j]);
        CHECK(out.f32()[T * heads * hd + j] == x.f32()[T * heads * hd + j]);
    }
    // A different theta is a different table (the cache must notice).
    Tensor out2 = Tensor::zeros({B * T, heads, hd});
    ops.rope_forward(out2, x, T, 500.0f);
    CHECK(max_rel_diff(out2, naive_rope(x, T, 500.0)) < 1e-6);
}

TEST_CASE("rope_forward may run in place") {
    CpuOps ops;
    std::mt19937 rng(32);
    Tensor x = randn({12, 2, 8}, rng), out = Tensor::zeros({12, 2, 8});
    ops.rope_forward(out, x, 6, 10000.0f);
    ops.rope_forward(x, x, 6, 10000.0f);
    CHECK(bitwise_equal(x, out));
}

TEST_CASE("rope_backward matches finite differences and inverts the rotation") {
    CpuOps ops;
    std::mt19937 rng(33);
    const int64_t T = 7, N = 2 * T, heads = 2, hd = 8;
    Tensor x = randn({N, heads, hd}, rng), R = randn({N, heads, hd}, rng);
    Tensor dx = Tensor::zeros({N, heads, hd});
    ops.rope_backward(dx, R, T, 10000.0f);
    const auto objective = dot_objective(R, [&](Tensor& out) { ops.rope_forward(out, x, T, 10000.0f); });
    fd_check("x", x, dx, objective, rng, {.h = 1e-2, .tol = 1e-3});

    // R^T R = I: backward of forward is x again.
    Tensor y = Tensor::zeros({N, heads, hd}), back = Tensor::zeros({N, heads, hd});
    ops.rope_forward(y, x, T, 10000.0f);
    ops.rope_backward(back, y, T, 10000.0f);
    CHECK(max_rel_diff(back, x) < 1e-6);
    // And backward accumulates.
    ops.rope_backward(back, y, T, 10000.0f);
    Tensor twice = x.clone();
    ops.scale_inplace(twice, 2.0f);
    CHECK(max_rel_diff(back, twice) < 2e-6);
}

TEST_CASE("rope rejects bad shapes") {
    CpuOps ops;
    Tensor odd = Tensor::zeros({4, 2, 5}), odd_out = Tensor::zeros({4, 2, 5});
    CHECK_THROWS_AS(ops.rope_forward(odd_out, odd, 4, 10000.0f), std::invalid_argument);
    Tensor x = Tensor::zeros({6, 2, 4}), out = Tensor::zeros({6, 2, 4});
    CHECK_THROWS_AS(ops.rope_forward(out, x, 4, 10000.0f), std::invalid_argument);  // 6 rows, seq_len 4
    Tensor rank2 = Tensor::zeros({6, 8}), rank2_out = Tensor::zeros({6, 8});
    CHECK_THROWS_AS(ops.rope_backward(rank2_out, rank2, 3, 10000.0f), std::invalid_argument);
}

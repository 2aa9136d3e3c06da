// linear_forward / linear_backward: y = x W^T, W [out, in].
#include <doctest/doctest.h>

#include <stdexcept>
#include <vector>

#include "src/cpu/cpu_ops.h"
#include "tests/unit/fd_check.h"

using namespace nb;
using namespace nb::test;

namespace {

// y[n, o] = sum_i x[n, i] w[o, i] in double.
std::vector<double> naive_linear(const Tensor& x, const Tensor& w) {
    const int64_t in = w.dim(1), out = w.dim(0), n_rows = x.numel() / in;
    std::vector<double> y(static_cast<size_t>(n_rows * out));
    for (int64_t n = 0; n < n_rows; ++n)
        for (int64_t o = 0; o < out; ++o) {
            double acc = 0.0;
            for (int64_t i = 0; i < in; ++i) acc += static_cast<double>(x.f32()[n * in + i]) * w.f32()[o * in + i];
            y[static_cast<size_t>(n * out + o)] = acc;
        }
    return y;
}

}  // namespace

TEST_CASE("linear_forward matches a double-precision loop (rank-3 input)") {
    CpuOps ops;
    std::mt19937 rng(1);
    Tensor x = randn({2, 3, 37}, rng), w = randn({19, 37}, rng);
    Tensor y = Tensor::zeros({2, 3, 19});
    y.fill(123.0f);  // forward overwrites
    ops.linear_forward(y, x, w);
    CHECK(max_rel_diff(y, naive_linear(x, w)) < 1e-5);
}

TEST_CASE("linear_backward matches finite differences") {
    CpuOps ops;
    std::mt19937 rng(2);
    Tensor x = randn({6, 5}, rng), w = randn({4, 5}, rng), R = randn({6, 4}, rng);
    Tensor dx = Tensor::zeros({6, 5}), dw = Tensor::zeros({4, 5});
    ops.linear_backward(dx, dw, R, x, w);
    auto objective = [&] {
        Tensor y = Tensor::zeros({6, 4});
        ops.linear_forward(y, x, w);
        return dot(y, R);
    };
    // L is bilinear, so central differences are exact up to rounding: a tight tolerance.
    fd_check("x", x, dx, objective, rng, {.h = 1e-2, .tol = 1e-3});
    fd_check("w", w, dw, objective, rng, {.h = 1e-2, .tol = 1e-3});
}

TEST_CASE("the finite-difference check catches a wrong gradient") {
    CpuOps ops;
    std::mt19937 rng(3);
    Tensor x = randn({6, 5}, rng), w = randn({4, 5}, rng), R = randn({6, 4}, rng);
    Tensor dx = Tensor::zeros({6, 5}), dw = Tensor::zeros({4, 5});
    ops.linear_backward(dx, dw, R, x, w);
    auto objective = [&] {
        Tensor y = Tensor::zeros({6, 4});
        ops.linear_forward(y, x, w);
        return dot(y, R);
    };
    ops.scale_inplace(dw, 1.05f);  // a 5% scale error
    CHECK(fd_compare(w, dw, objective, rng).failures > 0);
    ops.scale_inplace(dx, -1.0f);  // a sign error
    CHECK(fd_compare(x, dx, objective, rng).failures > 0);
}

TEST_CASE("linear_backward accumulates into dx and dw") {
    CpuOps ops;
    std::mt19937 rng(4);
    Tensor x = randn({33, 20}, rng), w = randn({12, 20}, rng), dy = randn({33, 12}, rng);
    Tensor gx = Tensor::zeros({33, 20}), gw = Tensor::zeros({12, 20});
    ops.linear_backward(gx, gw, dy, x, w);

    Tensor dx0 = randn({33, 20}, rng), dw0 = randn({12, 20}, rng);
    Tensor dx = dx0.clone(), dw = dw0.clone();
    ops.linear_backward(dx, dw, dy, x, w);
    ops.linear_backward(dx, dw, dy, x, w);
    Tensor want_dx = dx0.clone(), want_dw = dw0.clone();
    ops.add_inplace(want_dx, gx);
    ops.add_inplace(want_dx, gx);
    ops.add_inplace(want_dw, gw);
    ops.add_inplace(want_dw, gw);
    CHECK(max_rel_diff(dx, want_dx) < 1e-5);
    CHECK(max_rel_diff(dw, want_dw) < 1e-5);

    // From zero, twice is exactly double (one K block: each call adds the same sum).
    Tensor dx2 = Tensor::zeros({33, 20}), dw2 = Tensor::zeros({12, 20});
    ops.linear_backward(dx2, dw2, dy, x, w);
    ops.linear_backward(dx2, dw2, dy, x, w);
    ops.scale_inplace(gx, 2.0f);
    ops.scale_inplace(gw, 2.0f);
    CHECK(max_rel_diff(dx2, gx) < 1e-6);
    CHECK(max_rel_diff(dw2, gw) < 1e-6);
}

TEST_CASE("linear_backward skips an undefined dx or dw") {
    CpuOps ops;
    std::mt19937 rng(5);
    Tensor x = randn({7, 9}, rng), w = randn({3, 9}, rng), dy = randn({7, 3}, rng);
    Tensor dx = Tensor::zeros({7, 9}), dw = Tensor::zeros({3, 9});
    ops.linear_backward(dx, dw, dy, x, w);
    Tensor none, only_dx = Tensor::zeros({7, 9}), only_dw = Tensor::zeros({3, 9});
    ops.linear_backward(only_dx, none, dy, x, w);
    ops.linear_backward(none, only_dw, dy, x, w);
    CHECK(bitwise_equal(only_dx, dx));
    CHECK(bitwise_equal(only_dw, dw));
}

TEST_CASE("linear rejects mismatched shapes") {
    CpuOps ops;
    Tensor x = Tensor::zeros({4, 5}), w = Tensor::zeros({3, 5}), none;
    Tensor bad_y = Tensor::zeros({4, 4}), bad_rows = Tensor::zeros({5, 3}), bad_w = Tensor::zeros({3, 6});
    CHECK_THROWS_AS(ops.linear_forward(bad_y, x, w), std::invalid_argument);
    CHECK_THROWS_AS(ops.linear_forward(bad_rows, x, w), std::invalid_argument);
    Tensor y = Tensor::zeros({4, 3});
    CHECK_THROWS_AS(ops.linear_forward(y, x, bad_w), std::invalid_argument);
    Tensor bad_dw = Tensor::zeros({5, 3});
    CHECK_THROWS_AS(ops.linear_backward(none, bad_dw, y, x, w), std::invalid_argument);
    CHECK_THROWS_WITH_AS(ops.linear_forward(bad_y, x, w), doctest::Contains("linear_forward"), std::invalid_argument);
}

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

// y = x W^T for random x [rows, in], W [out, in] and an output gradient R [rows, out] (drawn in that order from
// `seed`), with linear_backward's dx and dw from zero; they are the gradients of L = sum(y * R), `objective`.
struct LinearGradients {
    CpuOps ops;
    std::mt19937 rng;
    Tensor x, w, R, dx, dw;
    std::function<double()> objective = dot_objective(R, [this](Tensor& y) { ops.linear_forward(y, x, w); });

    LinearGradients(unsigned seed, int64_t rows, int64_t in, int64_t out)
        : rng(seed),
          x(randn({rows, in}, rng)),
          w(randn({out, in}, rng)),
          R(randn({rows, out}, rng)),
          dx(Tensor::zeros({rows, in})),
          dw(Tensor::zeros({out, in})) {
        ops.linear_backward(dx, dw, R, x, w);
    }
};

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
    LinearGradients g(2, 6, 5, 4);
    // L is bilinear, so central differences are exact up to rounding: a tight tolerance.
    fd_check("x", g.x, g.dx, g.objective, g.rng, {.h = 1e-2, .tol = 1e-3});
    fd_check("w", g.w, g.dw, g.objective, g.rng, {.h = 1e-2, .tol = 1e-3});
}

TEST_CASE("the finite-difference check catches a wrong gradient") {
    LinearGradients g(3, 6, 5, 4);
    g.ops.scale_inplace(g.dw, 1.05f);  // a 5% scale error
    CHECK(fd_compare(g.w, g.dw, g.objective, g.rng).failures > 0);
    g.ops.scale_inplace(g.dx, -1.0f);  // a sign error
    CHECK(fd_compare(g.x, g.dx, g.objective, g.rng).failures > 0);
}

TEST_CASE("linear_backward accumulates into dx and dw") {
    LinearGradients g(4, 33, 20, 12);
    CpuOps& ops = g.ops;
    std::mt19937& rng = g.rng;
    const Tensor &x = g.x, &w = g.w, &dy = g.R;
    Tensor &gx = g.dx, &gw = g.dw;  // from zero: one call's sum

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
    LinearGradients g(5, 7, 9, 3);
    CpuOps& ops = g.ops;
    const Tensor &x = g.x, &w = g.w, &dy = g.R, &dx = g.dx, &dw = g.dw;
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

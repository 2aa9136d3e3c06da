// swiglu_forward / swiglu_backward: out = silu(gate) * up.
#include <doctest/doctest.h>

#include <cmath>
#include <stdexcept>
#include <vector>

#include "src/cpu/cpu_ops.h"
#include "tests/unit/fd_check.h"

using namespace nb;
using namespace nb::test;

TEST_CASE("swiglu_forward matches silu(gate) * up in double") {
    CpuOps ops;
    std::mt19937 rng(51);
    Tensor gate = randn({5, 13}, rng, 3.0f), up = randn({5, 13}, rng), out = Tensor::zeros({5, 13});
    ops.swiglu_forward(out, gate, up);
    std::vector<double> want(static_cast<size_t>(out.numel()));
    for (int64_t i = 0; i < out.numel(); ++i) {
        const double z = gate.f32()[i];
        want[static_cast<size_t>(i)] = z / (1.0 + std::exp(-z)) * up.f32()[i];
    }
    CHECK(max_rel_diff(out, want) < 1e-6);
}

TEST_CASE("swiglu_backward matches finite differences") {
    CpuOps ops;
    std::mt19937 rng(52);
    Tensor gate = randn({6, 9}, rng, 2.0f), up = randn({6, 9}, rng), R = randn({6, 9}, rng);
    Tensor dgate = Tensor::zeros({6, 9}), dup = Tensor::zeros({6, 9});
    ops.swiglu_backward(dgate, dup, R, gate, up);
    const auto objective = dot_objective(R, [&](Tensor& out) { ops.swiglu_forward(out, gate, up); });
    fd_check("gate", gate, dgate, objective, rng, {.h = 1e-2, .tol = 1e-3});
    fd_check("up", up, dup, objective, rng, {.h = 1e-2, .tol = 1e-3});

    // Accumulates.
    ops.swiglu_backward(dgate, dup, R, gate, up);
    Tensor g1 = Tensor::zeros({6, 9}), u1 = Tensor::zeros({6, 9});
    ops.swiglu_backward(g1, u1, R, gate, up);
    ops.scale_inplace(g1, 2.0f);
    ops.scale_inplace(u1, 2.0f);
    CHECK(bitwise_equal(dgate, g1));
    CHECK(bitwise_equal(dup, u1));
}

TEST_CASE("swiglu stays finite for large |gate|") {
    CpuOps ops;
    Tensor gate = Tensor::zeros({4}), up = Tensor::zeros({4}), out = Tensor::zeros({4});
    const float z[4] = {-200.0f, -90.0f, 90.0f, 200.0f};
    for (int i = 0; i < 4; ++i) {
        gate.f32()[i] = z[i];
        up.f32()[i] = 1.0f;
    }
    ops.swiglu_forward(out, gate, up);
    Tensor dgate = Tensor::zeros({4}), dup = Tensor::zeros({4}), dout = Tensor::zeros({4});
    dout.fill(1.0f);
    ops.swiglu_backward(dgate, dup, dout, gate, up);
    for (int i = 0; i < 4; ++i) {
        CHECK(std::isfinite(out.f32()[i]));
        CHECK(std::isfinite(dgate.f32()[i]));
    }
    CHECK(out.f32()[0] == 0.0f);
    CHECK(out.f32()[3] == 200.0f);
    CHECK(dgate.f32()[3] == 1.0f);
}

TEST_CASE("swiglu rejects mismatched shapes") {
    CpuOps ops;
    Tensor a = Tensor::zeros({2, 3}), b = Tensor::zeros({3, 2}), out = Tensor::zeros({2, 3});
    CHECK_THROWS_AS(ops.swiglu_forward(out, a, b), std::invalid_argument);
}

// Gradient-norm clipping with numbers small enough to check by hand: gradients {3, 4} and {12} have the
// global norm sqrt(9 + 16 + 144) = 13.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "src/cpu/cpu_ops.h"
#include "optim/grad_clip.h"

using nb::Tensor;
using nb::TensorSet;

namespace {

Tensor tensor_of(const std::vector<float>& values) {
    Tensor t = Tensor::zeros({static_cast<int64_t>(values.size())});
    for (size_t i = 0; i < values.size(); ++i) t.f32()[i] = values[i];
    return t;
}

// A layout of trainable parameters shaped like `set`'s tensors.
nb::ParamLayout layout_of(const TensorSet& set) {
    nb::ParamLayout layout;
    for (int i = 0; i < set.size(); ++i) layout.add({"p" + std::to_string(i), set[i].shape(), nb::ParamKind::hidden_matrix});
    return layout;
}

TensorSet three_four_twelve() {
    TensorSet grads;
    grads.tensors.push_back(tensor_of({3.0f, 4.0f}));
    grads.tensors.push_back(tensor_of({12.0f}));
    return grads;
}

}  // namespace

TEST_CASE("the global norm is the L2 norm over all tensors together") {
    nb::CpuOps ops;
    TensorSet grads = three_four_twelve();
    CHECK(nb::grad_sum_squares(ops, layout_of(grads), grads) == 169.0);
    CHECK(nb::global_grad_norm(ops, layout_of(grads), grads) == 13.0);
}

TEST_CASE("a norm above max_norm scales every gradient by max_norm / (norm + 1e-6)") {
    nb::CpuOps ops;
    TensorSet grads = three_four_twelve();
    double norm = nb::clip_grad_norm(ops, layout_of(grads), grads, 6.5);
    CHECK(norm == 13.0);  // returned before clipping
    const float coef = static_cast<float>(6.5 / (13.0 + 1e-6));
    CHECK(coef < 0.5f);
    CHECK(grads[0].f32()[0] == 3.0f * coef);
    CHECK(grads[0].f32()[1] == 4.0f * coef);
    CHECK(grads[1].f32()[0] == 12.0f * coef);
    CHECK(grads[0].f32()[0] == doctest::Approx(1.5).epsilon(1e-6));
    CHECK(nb::global_grad_norm(ops, layout_of(grads), grads) == doctest::Approx(6.5).epsilon(1e-6));
}

TEST_CASE("a norm at or below max_norm leaves the gradients exactly as they were") {
    nb::CpuOps ops;
    for (double max_norm : {26.0, 13.0 + 1e-6, 13.1}) {
        CAPTURE(max_norm);
        TensorSet grads = three_four_twelve();
        CHECK(nb::clip_grad_norm(ops, layout_of(grads), grads, max_norm) == 13.0);
        CHECK(grads[0].f32()[0] == 3.0f);
        CHECK(grads[0].f32()[1] == 4.0f);
        CHECK(grads[1].f32()[0] == 12.0f);
    }
    // 13 + 1e-6 is clip_coef 1, not < 1; just under it clips.
    CHECK(nb::clip_coefficient(13.0, 13.0 + 1e-6) == 1.0);
    CHECK(nb::clip_coefficient(13.0, 13.0) < 1.0);
}

TEST_CASE("max_norm <= 0 disables clipping but still reports the norm") {
    nb::CpuOps ops;
    for (double max_norm : {0.0, -1.0}) {
        TensorSet grads = three_four_twelve();
        CHECK(nb::clip_grad_norm(ops, layout_of(grads), grads, max_norm) == 13.0);
        CHECK(grads[1].f32()[0] == 12.0f);
    }
}

TEST_CASE("zero gradients: norm 0, nothing divides by zero") {
    nb::CpuOps ops;
    TensorSet grads;
    grads.tensors.push_back(Tensor::zeros({4}));
    CHECK(nb::clip_grad_norm(ops, layout_of(grads), grads, 1.0) == 0.0);
    CHECK(grads[0].f32()[0] == 0.0f);
}

TEST_CASE("a NaN or infinite norm is returned as is and leaves the gradients untouched") {
    nb::CpuOps ops;
    TensorSet grads = three_four_twelve();
    grads[1].f32()[0] = std::numeric_limits<float>::quiet_NaN();
    CHECK(std::isnan(nb::clip_grad_norm(ops, layout_of(grads), grads, 1.0)));
    CHECK(grads[0].f32()[0] == 3.0f);
    CHECK(grads[0].f32()[1] == 4.0f);

    grads = three_four_twelve();
    grads[1].f32()[0] = std::numeric_limits<float>::infinity();
    CHECK(std::isinf(nb::clip_grad_norm(ops, layout_of(grads), grads, 1.0)));
    CHECK(grads[0].f32()[0] == 3.0f);
}

TEST_CASE("a buffer (the expert bias's loads) counts 0 in the norm and is neither clipped nor averaged") {
    nb::CpuOps ops;
    TensorSet grads = three_four_twelve();
    grads.tensors.push_back(tensor_of({100.0f, 7.0f}));  // loads, not a gradient
    nb::ParamLayout layout = layout_of(three_four_twelve());
    layout.add({"layers.0.moe.expert_bias", {2}, nb::ParamKind::expert_bias});
    const std::vector<double> sums = nb::param_sum_squares(ops, layout, grads);
    CHECK(sums == std::vector<double>{25.0, 144.0, 0.0});  // one value per parameter: the allgather's counts
    CHECK(nb::clip_grad_norm(ops, layout, grads, 6.5) == 13.0);
    CHECK(grads[1].f32()[0] < 12.0f);
    CHECK(grads[2].f32()[0] == 100.0f);
    nb::average_grads(ops, layout, grads, 4);
    CHECK(grads[2].f32()[0] == 100.0f);
    CHECK(grads[2].f32()[1] == 7.0f);
    CHECK(grads[0].f32()[1] == doctest::Approx(4.0 * 6.5 / 13.0 / 4.0).epsilon(1e-6));
}

// embedding_forward / embedding_backward: a row gather and its scatter-add.
#include <doctest/doctest.h>

#include <stdexcept>

#include "src/cpu/cpu_ops.h"
#include "tests/unit/fd_check.h"

using namespace nb;
using namespace nb::test;

TEST_CASE("embedding_forward gathers table rows") {
    CpuOps ops;
    std::mt19937 rng(11);
    Tensor table = randn({10, 6}, rng), tokens = rand_ids({2, 5}, 10, rng);
    Tensor out = Tensor::zeros({2, 5, 6});
    ops.embedding_forward(out, tokens, table);
    for (int64_t n = 0; n < 10; ++n)
        for (int64_t j = 0; j < 6; ++j) CHECK(out.f32()[n * 6 + j] == table.f32()[tokens.i32()[n] * 6 + j]);
}

TEST_CASE("embedding_backward matches finite differences, with repeated tokens") {
    CpuOps ops;
    std::mt19937 rng(12);
    Tensor table = randn({7, 4}, rng), tokens = rand_ids({15}, 7, rng), R = randn({15, 4}, rng);
    tokens.i32()[3] = tokens.i32()[9] = tokens.i32()[14] = 2;  // one row hit three times
    Tensor dtable = Tensor::zeros({7, 4});
    ops.embedding_backward(dtable, tokens, R);
    const auto objective = dot_objective(R, [&](Tensor& out) { ops.embedding_forward(out, tokens, table); });
    fd_check("table", table, dtable, objective, rng, {.h = 1e-2, .tol = 1e-3});
}

TEST_CASE("embedding_backward accumulates in position order") {
    CpuOps ops;
    std::mt19937 rng(13);
    Tensor tokens = Tensor::zeros({3}, DType::i32), dout = Tensor::zeros({3, 1});
    tokens.i32()[0] = tokens.i32()[1] = tokens.i32()[2] = 0;
    // In float, (1e8 + 1) + 1 - ... depends on order: position order gives ((d + 1e8) - 1e8) + 1.
    dout.f32()[0] = 1e8f;
    dout.f32()[1] = -1e8f;
    dout.f32()[2] = 1.0f;
    Tensor dtable = Tensor::zeros({2, 1});
    dtable.f32()[0] = 0.5f;
    ops.embedding_backward(dtable, tokens, dout);
    CHECK(dtable.f32()[0] == ((0.5f + 1e8f) - 1e8f) + 1.0f);
    CHECK(dtable.f32()[1] == 0.0f);
}

TEST_CASE("embedding rejects bad token ids and shapes") {
    CpuOps ops;
    Tensor table = Tensor::zeros({5, 3}), tokens = Tensor::zeros({4}, DType::i32), out = Tensor::zeros({4, 3});
    tokens.i32()[2] = 5;
    CHECK_THROWS_AS(ops.embedding_forward(out, tokens, table), std::out_of_range);
    tokens.i32()[2] = -1;
    Tensor dtable = Tensor::zeros({5, 3});
    CHECK_THROWS_AS(ops.embedding_backward(dtable, tokens, out), std::out_of_range);
    tokens.i32()[2] = 0;
    Tensor bad_out = Tensor::zeros({4, 2});
    CHECK_THROWS_AS(ops.embedding_forward(bad_out, tokens, table), std::invalid_argument);
}

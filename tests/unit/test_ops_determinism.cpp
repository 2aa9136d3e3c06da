// Bitwise determinism of the CPU backend across OpenBLAS thread counts.
//
// OpenBLAS partitions an sgemm over output tiles, never over the K reduction, so each output element is summed
// in one order whatever the thread count; the rest of CpuOps is single-threaded. These tests hold us to that on
// problems big enough that OpenBLAS really does split them.
#include <doctest/doctest.h>

#include <cblas.h>

#include "src/cpu/cpu_ops.h"
#include "tests/unit/fd_check.h"

using namespace nb;
using namespace nb::test;

namespace {

// Runs fn with OpenBLAS at `threads` threads, then restores the previous count.
template <typename Fn>
void with_blas_threads(int threads, Fn&& fn) {
    const int before = openblas_get_num_threads();
    openblas_set_num_threads(threads);
    try {
        fn();
    } catch (...) {
        openblas_set_num_threads(before);
        throw;
    }
    openblas_set_num_threads(before);
}

struct LinearResult {
    Tensor y, dx, dw;
};

LinearResult run_linear(int threads, const Tensor& x, const Tensor& w, const Tensor& dy) {
    LinearResult r{Tensor::zeros({x.dim(0), w.dim(0)}), Tensor::zeros(x.shape()), Tensor::zeros(w.shape())};
    with_blas_threads(threads, [&] {
        CpuOps ops;
        ops.linear_forward(r.y, x, w);
        ops.linear_backward(r.dx, r.dw, dy, x, w);
    });
    return r;
}

struct AttentionResult {
    Tensor out, lse, dq, dk, dv;
};

AttentionResult run_attention(int threads, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout) {
    AttentionResult r{Tensor::zeros(q.shape()), Tensor::zeros({q.dim(0), q.dim(2), q.dim(1)}), Tensor::zeros(q.shape()),
                      Tensor::zeros(k.shape()), Tensor::zeros(v.shape())};
    with_blas_threads(threads, [&] {
        CpuOps ops;
        ops.attention_forward(r.out, r.lse, q, k, v);
        ops.attention_backward(r.dq, r.dk, r.dv, dout, q, k, v, r.out, r.lse);
    });
    return r;
}

}  // namespace

TEST_CASE("linear forward and backward are bitwise identical with 1 and 2 OpenBLAS threads") {
    std::mt19937 rng(81);
    const int64_t N = 512, in = 768, out = 1024;
    Tensor x = randn({N, in}, rng), w = randn({out, in}, rng, 0.05f), dy = randn({N, out}, rng);
    const LinearResult one = run_linear(1, x, w, dy);
    const LinearResult two = run_linear(2, x, w, dy);
    CHECK(bitwise_equal(one.y, two.y));
    CHECK(bitwise_equal(one.dx, two.dx));
    CHECK(bitwise_equal(one.dw, two.dw));
    CHECK(CpuOps().sum_squares(one.dw) > 0.0);
}

TEST_CASE("attention forward and backward are bitwise identical with 1 and 2 OpenBLAS threads") {
    std::mt19937 rng(82);
    const int64_t B = 2, T = 200, H = 8, KV = 4, hd = 64;
    Tensor q = randn({B, T, H, hd}, rng), k = randn({B, T, KV, hd}, rng), v = randn({B, T, KV, hd}, rng);
    Tensor dout = randn({B, T, H, hd}, rng);
    const AttentionResult one = run_attention(1, q, k, v, dout);
    const AttentionResult two = run_attention(2, q, k, v, dout);
    CHECK(bitwise_equal(one.out, two.out));
    CHECK(bitwise_equal(one.lse, two.lse));
    CHECK(bitwise_equal(one.dq, two.dq));
    CHECK(bitwise_equal(one.dk, two.dk));
    CHECK(bitwise_equal(one.dv, two.dv));
}

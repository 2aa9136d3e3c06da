// attention_forward / attention_backward: causal grouped-query attention, scale 1/sqrt(hd).
#include <doctest/doctest.h>

#include <cmath>
#include <stdexcept>
#include <vector>

#include "src/cpu/cpu_ops.h"
#include "tests/unit/fd_check.h"

using namespace nb;
using namespace nb::test;

namespace {

struct Dims {
    int64_t B, T, H, KV, hd;
};

// out[b,t,h,:] = sum_{s<=t} softmax_s(q.k_s / sqrt(hd)) v_s, with kv head h / (H/KV); all in double.
void naive_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Dims& d, std::vector<double>& out,
                     std::vector<double>& lse) {
    out.assign(static_cast<size_t>(d.B * d.T * d.H * d.hd), 0.0);
    lse.assign(static_cast<size_t>(d.B * d.H * d.T), 0.0);
    const double scale = 1.0 / std::sqrt(static_cast<double>(d.hd));
    auto Q = [&](int64_t b, int64_t t, int64_t h, int64_t c) { return q.f32()[((b * d.T + t) * d.H + h) * d.hd + c]; };
    auto K = [&](int64_t b, int64_t t, int64_t g, int64_t c) { return k.f32()[((b * d.T + t) * d.KV + g) * d.hd + c]; };
    auto V = [&](int64_t b, int64_t t, int64_t g, int64_t c) { return v.f32()[((b * d.T + t) * d.KV + g) * d.hd + c]; };
    for (int64_t b = 0; b < d.B; ++b)
        for (int64_t h = 0; h < d.H; ++h) {
            const int64_t g = h / (d.H / d.KV);
            for (int64_t t = 0; t < d.T; ++t) {
                std::vector<double> s(static_cast<size_t>(t + 1));
                double mx = -INFINITY;
                for (int64_t j = 0; j <= t; ++j) {
                    double acc = 0.0;
                    for (int64_t c = 0; c < d.hd; ++c) acc += static_cast<double>(Q(b, t, h, c)) * K(b, j, g, c);
                    s[static_cast<size_t>(j)] = acc * scale;
                    mx = std::max(mx, acc * scale);
                }
                double z = 0.0;
                for (double sj : s) z += std::exp(sj - mx);
                lse[static_cast<size_t>((b * d.H + h) * d.T + t)] = mx + std::log(z);
                for (int64_t j = 0; j <= t; ++j) {
                    const double p = std::exp(s[static_cast<size_t>(j)] - mx) / z;
                    for (int64_t c = 0; c < d.hd; ++c)
                        out[static_cast<size_t>(((b * d.T + t) * d.H + h) * d.hd + c)] += p * V(b, j, g, c);
                }
            }
        }
}

struct AttnCase {
    Dims d;
    Tensor q, k, v, out, lse;
    AttnCase(const Dims& dims, std::mt19937& rng, float qk_std = 1.0f)
        : d(dims),
          q(randn({d.B, d.T, d.H, d.hd}, rng, qk_std)),
          k(randn({d.B, d.T, d.KV, d.hd}, rng, qk_std)),
          v(randn({d.B, d.T, d.KV, d.hd}, rng)),
          out(Tensor::zeros({d.B, d.T, d.H, d.hd})),
          lse(Tensor::zeros({d.B, d.H, d.T})) {}
};

void check_forward(const Dims& d, uint32_t seed) {
    CAPTURE(d.B);
    CAPTURE(d.T);
    CAPTURE(d.H);
    CAPTURE(d.KV);
    CAPTURE(d.hd);
    CpuOps ops;
    std::mt19937 rng(seed);
    AttnCase c(d, rng, 1.5f);  // peaky enough that a wrong mask or scale shows
    ops.attention_forward(c.out, c.lse, c.q, c.k, c.v);
    std::vector<double> want_out, want_lse;
    naive_attention(c.q, c.k, c.v, d, want_out, want_lse);
    CHECK(max_rel_diff(c.out, want_out) < 2e-5);
    CHECK(max_rel_diff(c.lse, want_lse) < 2e-6);
}

// Gradient check of q, k and v through L = sum(out * R).
void check_gradients(const Dims& d, uint32_t seed, int64_t max_samples) {
    CAPTURE(d.T);
    CAPTURE(d.H);
    CAPTURE(d.KV);
    CpuOps ops;
    std::mt19937 rng(seed);
    AttnCase c(d, rng);
    Tensor R = randn({d.B, d.T, d.H, d.hd}, rng);
    ops.attention_forward(c.out, c.lse, c.q, c.k, c.v);
    Tensor dq = Tensor::zeros(c.q.shape()), dk = Tensor::zeros(c.k.shape()), dv = Tensor::zeros(c.v.shape());
    ops.attention_backward(dq, dk, dv, R, c.q, c.k, c.v, c.out, c.lse);
    const auto objective = dot_objective(R, [&](Tensor& out) {
        Tensor lse = Tensor::zeros(c.lse.shape());
        ops.attention_forward(out, lse, c.q, c.k, c.v);
    });
    const FdOptions opt{.h = 1e-2, .tol = 5e-3, .max_samples = max_samples};
    fd_check("q", c.q, dq, objective, rng, opt);
    fd_check("k", c.k, dk, objective, rng, opt);
    fd_check("v", c.v, dv, objective, rng, opt);
}

}  // namespace

TEST_CASE("attention_forward matches a double-precision loop (causal, GQA, MHA, MQA)") {
    check_forward({2, 7, 4, 2, 8}, 41);    // GQA, T not a power of two
    check_forward({1, 70, 4, 2, 16}, 42);  // GQA over two query tiles (70 > 64)
    check_forward({2, 130, 2, 2, 8}, 43);  // MHA, three tiles
    check_forward({1, 65, 6, 1, 4}, 44);   // MQA, a one-row last tile
    check_forward({1, 1, 2, 1, 8}, 45);    // a single token
}

TEST_CASE("attention_backward matches finite differences (GQA H=4 KV=2, T=7, all elements)") {
    check_gradients({2, 7, 4, 2, 8}, 46, 1 << 20);
}

TEST_CASE("attention_backward matches finite differences across query tiles (T=70, sampled)") {
    check_gradients({1, 70, 4, 2, 8}, 47, 200);
}

TEST_CASE("attention_backward matches finite differences for MQA (KV=1)") {
    check_gradients({1, 5, 3, 1, 4}, 48, 1 << 20);
}

TEST_CASE("attention_backward accumulates into dq, dk and dv") {
    CpuOps ops;
    std::mt19937 rng(49);
    const Dims d{2, 9, 4, 2, 8};
    AttnCase c(d, rng);
    Tensor dout = randn(c.out.shape(), rng);
    ops.attention_forward(c.out, c.lse, c.q, c.k, c.v);
    Tensor gq = Tensor::zeros(c.q.shape()), gk = Tensor::zeros(c.k.shape()), gv = Tensor::zeros(c.v.shape());
    ops.attention_backward(gq, gk, gv, dout, c.q, c.k, c.v, c.out, c.lse);
    Tensor dq = Tensor::zeros(c.q.shape()), dk = Tensor::zeros(c.k.shape()), dv = Tensor::zeros(c.v.shape());
    ops.attention_backward(dq, dk, dv, dout, c.q, c.k, c.v, c.out, c.lse);
    ops.attention_backward(dq, dk, dv, dout, c.q, c.k, c.v, c.out, c.lse);
    // dk/dv already sum two query heads each inside one call, so "twice" is 2x only up to rounding.
    for (Tensor* g : {&gq, &gk, &gv}) ops.scale_inplace(*g, 2.0f);
    CHECK(max_rel_diff(dq, gq) < 1e-6);
    CHECK(max_rel_diff(dk, gk) < 1e-6);
    CHECK(max_rel_diff(dv, gv) < 1e-6);
    CHECK(ops.sum_squares(gk) > 0.0);
}

TEST_CASE("attention rejects mismatched shapes") {
    CpuOps ops;
    Tensor q = Tensor::zeros({1, 4, 3, 8}), k = Tensor::zeros({1, 4, 2, 8}), v = Tensor::zeros({1, 4, 2, 8});
    Tensor out = Tensor::zeros({1, 4, 3, 8}), lse = Tensor::zeros({1, 3, 4});
    CHECK_THROWS_AS(ops.attention_forward(out, lse, q, k, v), std::invalid_argument);  // 3 % 2 != 0
    Tensor q4 = Tensor::zeros({1, 4, 4, 8}), out4 = Tensor::zeros({1, 4, 4, 8});
    Tensor bad_lse = Tensor::zeros({1, 4, 3});
    CHECK_THROWS_AS(ops.attention_forward(out4, bad_lse, q4, k, v), std::invalid_argument);
    Tensor lse4 = Tensor::zeros({1, 4, 4}), bad_v = Tensor::zeros({1, 4, 2, 4});
    CHECK_THROWS_AS(ops.attention_forward(out4, lse4, q4, k, bad_v), std::invalid_argument);
    Tensor dq = Tensor::zeros({1, 4, 4, 8}), dk = Tensor::zeros({1, 4, 2, 8}), bad_dv = Tensor::zeros({1, 4, 4, 8});
    CHECK_THROWS_AS(ops.attention_backward(dq, dk, bad_dv, out4, q4, k, v, out4, lse4), std::invalid_argument);
}

// The ops of decoding with a KV cache (model/kv_cache.h): rope_forward_at and attention_forward_cached, on the CPU,
// against the training ops they stand in for.
//   - rope_forward_at(first_position = p) on rows is rope_forward's rows p.. of a longer sequence, bit for bit
//     (the same table entry, the same arithmetic);
//   - attention_forward_cached with Tq = Tk is attention_forward's output, bit for bit;
//   - one query at a time over a growing cache (decode) gives each row of the full causal attention (to f32
//     rounding: a one-row tile sums in another order).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <stdexcept>

#include "src/cpu/cpu_ops.h"
#include "tests/unit/fd_check.h"

using namespace nb;
using namespace nb::test;

namespace {

bool same_bits(const Tensor& a, const Tensor& b) {
    if (a.shape() != b.shape()) return false;
    for (int64_t i = 0; i < a.numel(); ++i)
        if (std::memcmp(&a.f32()[i], &b.f32()[i], sizeof(float)) != 0) return false;
    return true;
}

}  // namespace

TEST_CASE("rope_forward_at is rope_forward at those positions") {
    CpuOps ops;
    std::mt19937 rng(11);
    const int64_t T = 40, heads = 3, hd = 8;
    const Tensor x = randn({T, heads, hd}, rng);
    Tensor full = Tensor::zeros({T, heads, hd});
    ops.rope_forward(full, x, T, 10000.0f);
    for (const int64_t p : {0, 1, 17, 39}) {
        Tensor part = Tensor::zeros({T - p, heads, hd});
        ops.rope_forward_at(part, x.rows(p, T).clone(), p, 10000.0f);
        CHECK(same_bits(part, full.rows(p, T).clone()));
    }
    Tensor out = Tensor::zeros({2, heads, hd});
    CHECK_THROWS_AS(ops.rope_forward_at(out, x.rows(0, 2).clone(), -1, 10000.0f), std::invalid_argument);
}

TEST_CASE("attention_forward_cached: the full attention, then one query at a time over the cache") {
    CpuOps ops;
    std::mt19937 rng(12);
    const int64_t T = 70, H = 4, KV = 2, hd = 8;  // T > 64: two query tiles
    const Tensor q = randn({1, T, H, hd}, rng), k = randn({1, T, KV, hd}, rng), v = randn({1, T, KV, hd}, rng);
    Tensor full = Tensor::zeros({1, T, H, hd}), lse = Tensor::zeros({1, H, T});
    ops.attention_forward(full, lse, q, k, v);
    Tensor cached = Tensor::zeros({1, T, H, hd});
    ops.attention_forward_cached(cached, q, k, v);
    CHECK(same_bits(cached, full));

    const Tensor q3 = q.reshaped({T, H, hd}), k3 = k.reshaped({T, KV, hd}), v3 = v.reshaped({T, KV, hd});
    double worst = 0;
    for (int64_t t = 0; t < T; ++t) {
        Tensor row = Tensor::zeros({1, 1, H, hd});
        ops.attention_forward_cached(row, q3.rows(t, t + 1).clone().reshaped({1, 1, H, hd}),
                                     k3.rows(0, t + 1).clone().reshaped({1, t + 1, KV, hd}),
                                     v3.rows(0, t + 1).clone().reshaped({1, t + 1, KV, hd}));
        const Tensor want = full.reshaped({T, H * hd}).rows(t, t + 1).clone();
        for (int64_t i = 0; i < H * hd; ++i)
            worst = std::max(worst, std::fabs(static_cast<double>(row.f32()[i]) - want.f32()[i]));
    }
    CHECK(worst < 1e-5);
    Tensor bad = Tensor::zeros({1, 3, H, hd});
    CHECK_THROWS_AS(ops.attention_forward_cached(bad, randn({1, 3, H, hd}, rng), k3.rows(0, 1).clone().reshaped({1, 1, KV, hd}),
                                                 v3.rows(0, 1).clone().reshaped({1, 1, KV, hd})),
                    std::invalid_argument);  // more queries than keys
}

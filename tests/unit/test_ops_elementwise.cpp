// add_inplace, scale_inplace, sum, sum_squares, and the AdamW kernel (against torch's own bits).
#include <doctest/doctest.h>

#include <cstring>
#include <stdexcept>
#include <vector>

#include "src/cpu/cpu_ops.h"
#include "tests/unit/fd_check.h"

using namespace nb;
using namespace nb::test;

namespace {

Tensor from_bits(const std::vector<uint32_t>& bits) {
    Tensor t = Tensor::zeros({static_cast<int64_t>(bits.size())});
    std::memcpy(t.f32(), bits.data(), bits.size() * sizeof(uint32_t));
    return t;
}

Tensor from_floats(const std::vector<float>& values) {
    Tensor t = Tensor::zeros({static_cast<int64_t>(values.size())});
    std::memcpy(t.f32(), values.data(), values.size() * sizeof(float));
    return t;
}

}  // namespace

TEST_CASE("add_inplace and scale_inplace") {
    CpuOps ops;
    std::mt19937 rng(71);
    Tensor a = randn({4, 6}, rng), b = randn({2, 2, 6}, rng);  // same element count, other shape
    Tensor a0 = a.clone();
    ops.add_inplace(a, b);
    for (int64_t i = 0; i < a.numel(); ++i) CHECK(a.f32()[i] == a0.f32()[i] + b.f32()[i]);
    ops.scale_inplace(a, -0.5f);
    for (int64_t i = 0; i < a.numel(); ++i) CHECK(a.f32()[i] == (a0.f32()[i] + b.f32()[i]) * -0.5f);
    Tensor c = Tensor::zeros({5});
    CHECK_THROWS_AS(ops.add_inplace(a, c), std::invalid_argument);
}

TEST_CASE("sum and sum_squares accumulate in double in index order") {
    CpuOps ops;
    // In float, 1e8 + 1 - 1e8 loses the 1; in double it does not.
    Tensor x = from_floats({1e8f, 1.0f, -1e8f, 0.25f});
    CHECK(ops.sum(x) == 1.25);
    CHECK(ops.sum_squares(x) == 1e16 + 1.0 + 1e16 + 0.0625);

    std::mt19937 rng(72);
    Tensor y = randn({1000}, rng);
    double s = 0.0, s2 = 0.0;
    for (int64_t i = 0; i < y.numel(); ++i) {
        s += y.f32()[i];
        s2 += static_cast<double>(y.f32()[i]) * y.f32()[i];
    }
    CHECK(ops.sum(y) == s);  // same order, same bits
    CHECK(ops.sum_squares(y) == s2);
    CHECK(ops.sum(Tensor::zeros({0})) == 0.0);
}

// Expected bits from Debian's torch 1.13: torch.optim.AdamW(lr, betas=(b1, b2), eps, weight_decay, foreach=False),
// with every hyperparameter the float32 value below, three steps, 19 elements (16 in the vector body, 3 in the
// scalar tail of torch's kernels).
TEST_CASE("adamw_update_multi matches torch.optim.AdamW bit for bit") {
    CpuOps ops;
    Tensor p = from_floats({0.5f, -1.25f, 2.0f, 0.0f, -0.1f, 3.0f, 0.001f, -7.5f, 0.25f, 1.5f, -2.0f, 0.75f, 0.125f,
                            -0.3f, 4.0f, -0.05f, 0.6f, 0.9f, -1.1f});
    const std::vector<std::vector<uint32_t>> grads = {
        {0x3e00bf6cu, 0xbe07467fu, 0x3f23f2bdu, 0x3dd6d5dfu, 0xbf0921a1u, 0x3eb922fdu, 0x3fa6e979u, 0x3f7273e6u,
         0xbf3427feu, 0xbfa1f955u, 0xbf1f8eeau, 0x3d29456eu, 0xc014cd4eu, 0xbe600aecu, 0xbf9f7a03u, 0xbf3b75e0u,
         0xbf0b548fu, 0xbea1f218u, 0x3ed2c13du},
        {0x3c2ace2eu, 0xbaa87913u, 0x3c5fe1a1u, 0xbbd9f893u, 0x3b665d9bu, 0x3c140649u, 0x3a767295u, 0xbbf3a13du,
         0xbc1703f7u, 0xbb95fcd3u, 0x3b104e9du, 0xbc256a74u, 0xbb0915d6u, 0xbad0b30cu, 0x3bb1396au, 0x3b0cadd3u,
         0x3b68e5a5u, 0xbbd63f1eu, 0xbaa9e31eu},
        {0x41bc2774u, 0x42333634u, 0xc217167eu, 0x4235abbdu, 0x4221814bu, 0x41bb83c6u, 0x40fde09du, 0xc116aed6u,
         0x422ef665u, 0x426b3b23u, 0x42583239u, 0x421dcffdu, 0x412b8ae8u, 0xc210ff8cu, 0xbe08d4bau, 0x419d8dd2u,
         0xc21a9a77u, 0x413da899u, 0x414e55a6u},
    };
    const Tensor want_p =
        from_bits({0x3efc238au, 0xbf9f729bu, 0x3fff5aeeu, 0xbbdd7b09u, 0xbdc62021u, 0x403f615eu, 0xbbc8d9cfu,
                   0xc0efe3cbu, 0x3e818857u, 0x3fc03cceu, 0xbfff5d0du, 0x3f3e366au, 0x3e037eedu, 0xbe95ea0eu,
                   0x40801a4eu, 0xbd3f7301u, 0x3f1b3b0au, 0x3f670676u, 0xbf8d8fe5u});
    const Tensor want_m =
        from_bits({0x40173c34u, 0x408f05f7u, 0xc06e578cu, 0x409196e7u, 0x407fa6c7u, 0x4017f039u, 0x3f6629d3u,
                   0xbf5da01bu, 0x408a1e90u, 0x40b8e446u, 0x40ab5909u, 0x407ca7f4u, 0x3f62354cu, 0xc06923ffu,
                   0xbde90d10u, 0x3ff484deu, 0xc07a2a9bu, 0x3f945f47u, 0x3fa9520fu});
    const Tensor want_v =
        from_bits({0x41dd44a4u, 0x42c8bb5eu, 0x428eb58eu, 0x42ce4725u, 0x42a30cdau, 0x41dbcef3u, 0x404e542au,
                   0x408f342bu, 0x42bf5e72u, 0x432cfd68u, 0x43121521u, 0x429ba7afu, 0x40bfb951u, 0x4283684bu,
                   0x3d9149bfu, 0x419b56c7u, 0x42956a61u, 0x40e0f59eu, 0x41052a7du});
    Tensor m = Tensor::zeros({19}), v = Tensor::zeros({19});
    for (size_t s = 0; s < grads.size(); ++s) {
        const Tensor g = from_bits(grads[s]);
        ops.adamw_update_multi({{&p, &g, &m, &v, 0.1f}}, 3e-3f, 0.9f, 0.95f, 1e-8f, static_cast<int64_t>(s) + 1);
    }
    CHECK(bitwise_equal(p, want_p));
    CHECK(bitwise_equal(m, want_m));
    CHECK(bitwise_equal(v, want_v));
}

TEST_CASE("adamw_update_multi rejects mismatched tensors and step 0") {
    CpuOps ops;
    Tensor p = Tensor::zeros({4}), g = Tensor::zeros({4}), m = Tensor::zeros({4}), v = Tensor::zeros({3});
    CHECK_THROWS_AS(ops.adamw_update_multi({{&p, &g, &m, &v, 0.0f}}, 1e-3f, 0.9f, 0.999f, 1e-8f, 1),
                    std::invalid_argument);
    Tensor v4 = Tensor::zeros({4});
    CHECK_THROWS_AS(ops.adamw_update_multi({{&p, &g, &m, &v4, 0.0f}}, 1e-3f, 0.9f, 0.999f, 1e-8f, 0),
                    std::invalid_argument);
}

#include <doctest/doctest.h>

#include <cstdint>

#include "src/core/host_allocator.h"
#include "src/core/tensor.h"

using namespace nb;

TEST_CASE("host allocator: blocks are aligned and reused by size") {
    const size_t before = host_cached_bytes();
    void* a = host_allocate(1000);
    CHECK(reinterpret_cast<uintptr_t>(a) % 64 == 0);
    host_free(a, 1000);
    CHECK(host_cached_bytes() == before + 1024);
    void* b = host_allocate(1001);  // same rounded size: the cached block comes back
    CHECK(b == a);
    CHECK(host_cached_bytes() == before);
    void* c = host_allocate(5000);  // another size: a new block
    CHECK(c != a);
    host_free(b, 1001);
    host_free(c, 5000);
}

TEST_CASE("host allocator: a tensor made from a reused block is zero") {
    {
        Tensor t = Tensor::zeros({257});
        t.fill(3.0f);
    }
    Tensor u = Tensor::zeros({257});
    for (int64_t i = 0; i < u.numel(); ++i) REQUIRE(u.f32()[i] == 0.0f);
}

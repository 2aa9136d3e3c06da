// What the tensor-file tests share (test_tensor_file.cpp, test_safetensors.cpp): a sample of named tensors of every
// dtype and an empty and a rank-0 one, a bit-for-bit comparison, and their fuzz test's random damage.
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "src/core/error.h"
#include "src/core/tensor.h"

namespace nb::test {

struct SampleTensors {
    Tensor w = Tensor::zeros({3, 5}, DType::f32);
    Tensor b = Tensor::zeros({4}, DType::bf16);
    Tensor ids = Tensor::zeros({2, 2}, DType::i32);
    Tensor scalar = Tensor::zeros({}, DType::f32);
    Tensor none = Tensor::zeros({0, 7}, DType::f32);
    SampleTensors() {
        for (int i = 0; i < w.numel(); ++i) w.f32()[i] = 0.25f * static_cast<float>(i) - 1.0f;
        auto* raw = static_cast<uint16_t*>(b.data());
        for (int i = 0; i < 4; ++i) raw[i] = static_cast<uint16_t>(0x3f80 + i);
        for (int i = 0; i < 4; ++i) static_cast<int32_t*>(ids.data())[i] = 1000 * i - 7;
        scalar.f32()[0] = 3.5f;
    }
    std::vector<std::pair<std::string, const Tensor*>> named() const {
        return {{"weights.layers.0.attn.wq", &w}, {"exp_avg.b", &b}, {"ids", &ids}, {"step", &scalar},
                {"empty", &none}};
    }
};

inline bool same_bits(const Tensor& a, const Tensor& b) {
    return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.data(), b.data(), a.bytes()) == 0;
}

// Case `c` of the fuzz tests' damage to a good file: 1-4 flipped bits, a truncation, or random bytes (up to
// `max_random` of them) behind the file's first 8 bytes.
inline std::string damaged(const std::string& good, int c, std::mt19937_64& rng, size_t max_random) {
    std::string bytes = good;
    switch (c % 3) {
        case 0:
            for (int k = 0; k <= static_cast<int>(rng() % 4); ++k)
                bytes[rng() % bytes.size()] ^= static_cast<char>(1 << (rng() % 8));
            break;
        case 1: bytes.resize(rng() % bytes.size()); break;
        default:
            bytes = bytes.substr(0, 8);
            for (size_t k = rng() % max_random; k > 0; --k) bytes += static_cast<char>(rng());
    }
    return bytes;
}

// 3000 damaged copies of `good` (`damaged`, from `seed`) given to `decode`, which takes each or throws
// nb::RuntimeError naming `source` (checked): how many it took and how many it refused.
struct FuzzCounts {
    int accepted = 0, refused = 0;
};
inline FuzzCounts fuzz_decode(const std::string& good, uint64_t seed, size_t max_random, const std::string& source,
                              const std::function<void(const std::string&)>& decode) {
    std::mt19937_64 rng(seed);
    FuzzCounts n;
    for (int c = 0; c < 3000; ++c) {
        const std::string bytes = damaged(good, c, rng, max_random);
        try {
            decode(bytes);
            ++n.accepted;  // a flip inside the data: the manifest's sha256 is what catches that
        } catch (const RuntimeError& e) {
            CHECK(std::string(e.what()).find("'" + source + "': ") == 0);
            ++n.refused;
        }
    }
    return n;
}

}  // namespace nb::test

// Rng: a small deterministic random number generator that we own.
//
// Why our own: std::*_distribution outputs differ between standard libraries (and versions), so weight init
// and data order would not be reproducible across machines. Everything here is specified bit for bit:
//   - state: xoshiro256** (Blackman & Vigna, 2018), 256 bits, period 2^256 - 1;
//   - seeding: the four state words are four successive outputs of splitmix64 started at the seed, as the
//     xoshiro authors recommend (any seed, including 0, gives a good non-zero state);
//   - uniform(): the top 53 bits of next_u64() scaled by 2^-53, so [0, 1) with every double equally spaced;
//   - below(n): Lemire's multiply-shift with rejection (unbiased, usually one draw);
//   - normal(): Box-Muller in double from exactly two uniforms (no cached spare, so every call consumes the
//     same amount of the stream), rounded to float at the end.
// Caveat: sqrt is exact (IEEE), but log and cos come from libm, which is not required to round correctly; the same
// libm gives the same normals, a different one may differ in the last bit of a rare value. next_u64, uniform
// and below are exact everywhere.
#pragma once

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string_view>

namespace nb {

class Rng {
public:
    explicit Rng(uint64_t seed) {
        uint64_t x = seed;
        for (uint64_t& word : s_) word = splitmix64(x);
    }

    uint64_t next_u64() {
        // xoshiro256**: scramble s[1], then advance the linear state.
        const uint64_t result = rotl(s_[1] * 5, 7) * 9;
        const uint64_t t = s_[1] << 17;
        s_[2] ^= s_[0];
        s_[3] ^= s_[1];
        s_[1] ^= s_[2];
        s_[0] ^= s_[3];
        s_[2] ^= t;
        s_[3] = rotl(s_[3], 45);
        return result;
    }

    // Uniform in [0, 1): 53 random bits, the precision of a double.
    double uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

    // Uniform integer in [0, n), unbiased. n must be > 0.
    uint64_t below(uint64_t n) {
        if (n == 0) throw std::invalid_argument("Rng::below(0): empty range");
        // Lemire (2019): the high word of x * n is uniform in [0, n) once the low word is outside the small
        // biased zone [0, 2^64 mod n).
        unsigned __int128 m = static_cast<unsigned __int128>(next_u64()) * n;
        uint64_t low = static_cast<uint64_t>(m);
        if (low < n) {
            const uint64_t threshold = (0 - n) % n;  // 2^64 mod n
            while (low < threshold) {
                m = static_cast<unsigned __int128>(next_u64()) * n;
                low = static_cast<uint64_t>(m);
            }
        }
        return static_cast<uint64_t>(m >> 64);
    }

    // Standard normal (mean 0, variance 1), Box-Muller. u1 is taken from (0, 1] so log never sees 0.
    float normal() {
        const double u1 = 1.0 - uniform();
        const double u2 = uniform();
        const double radius = std::sqrt(-2.0 * std::log(u1));
        return static_cast<float>(radius * std::cos(kTwoPi * u2));
    }

    // A seed for a named sub-stream: FNV-1a (64-bit) of the name, combined with the seed through splitmix64.
    // Weight init uses Rng(Rng::mix(seed, "stage1.block3.attn.wq")) so a parameter's values depend on its name
    // and the seed only, never on how many parameters were initialized before it.
    static uint64_t mix(uint64_t seed, std::string_view name) {
        uint64_t hash = 0xcbf29ce484222325ull;  // FNV-1a 64-bit offset basis
        for (char c : name) {
            hash ^= static_cast<uint8_t>(c);
            hash *= 0x100000001b3ull;  // FNV-1a 64-bit prime
        }
        uint64_t x = seed;
        uint64_t mixed_seed = splitmix64(x);
        x = mixed_seed ^ hash;
        return splitmix64(x);
    }

    // splitmix64 (Steele, Lea & Flood): advances x by the golden-ratio increment and returns a mixed output.
    static uint64_t splitmix64(uint64_t& x) {
        x += 0x9e3779b97f4a7c15ull;
        uint64_t z = x;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }

private:
    static constexpr double kTwoPi = 6.283185307179586476925286766559;
    static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
    uint64_t s_[4];
};

}  // namespace nb

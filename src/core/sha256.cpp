// SHA-256 from FIPS 180-4: section 4.1.2 (functions), 4.2.2 (constants), 5.1.1 (padding), 5.3.3 (initial
// hash value), 6.2.2 (hash computation). Words are big-endian.
#include "src/core/sha256.h"

#include <algorithm>
#include <cstring>

#include "src/core/sha256_blocks.h"

namespace nb {

namespace sha256_blocks {

alignas(16) const uint32_t kRoundConstants[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

}  // namespace sha256_blocks

namespace {

// 5.3.3: the first 32 bits of the fractional parts of the square roots of the first 8 primes.
constexpr uint32_t kInitialHash[8] = {
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
};

inline uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }
inline uint32_t ch(uint32_t x, uint32_t y, uint32_t z) { return (x & y) ^ (~x & z); }
inline uint32_t maj(uint32_t x, uint32_t y, uint32_t z) { return (x & y) ^ (x & z) ^ (y & z); }
inline uint32_t big_sigma0(uint32_t x) { return rotr(x, 2) ^ rotr(x, 13) ^ rotr(x, 22); }
inline uint32_t big_sigma1(uint32_t x) { return rotr(x, 6) ^ rotr(x, 11) ^ rotr(x, 25); }
inline uint32_t small_sigma0(uint32_t x) { return rotr(x, 7) ^ rotr(x, 18) ^ (x >> 3); }
inline uint32_t small_sigma1(uint32_t x) { return rotr(x, 17) ^ rotr(x, 19) ^ (x >> 10); }

inline uint32_t load_be32(const uint8_t* p) {
    return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | uint32_t(p[3]);
}

// 6.2.2 on one 64-byte block.
void compress_one(uint32_t state[8], const uint8_t* block) {
    // Step 1: the message schedule.
    uint32_t w[64];
    for (int t = 0; t < 16; t++) w[t] = load_be32(block + 4 * t);
    for (int t = 16; t < 64; t++) w[t] = small_sigma1(w[t - 2]) + w[t - 7] + small_sigma0(w[t - 15]) + w[t - 16];

    // Steps 2-4: 64 rounds on the working variables, then add into the hash value.
    uint32_t a = state[0], b = state[1], c = state[2], d = state[3];
    uint32_t e = state[4], f = state[5], g = state[6], h = state[7];
    for (int t = 0; t < 64; t++) {
        uint32_t t1 = h + big_sigma1(e) + ch(e, f, g) + sha256_blocks::kRoundConstants[t] + w[t];
        uint32_t t2 = big_sigma0(a) + maj(a, b, c);
        h = g;
        g = f;
        f = e;
        e = d + t1;
        d = c;
        c = b;
        b = a;
        a = t1 + t2;
    }
    state[0] += a;
    state[1] += b;
    state[2] += c;
    state[3] += d;
    state[4] += e;
    state[5] += f;
    state[6] += g;
    state[7] += h;
}

}  // namespace

Sha256::Sha256() { reset(); }

void Sha256::reset() {
    for (int i = 0; i < 8; i++) state_[i] = kInitialHash[i];
    buffer_bytes_ = 0;
    total_bytes_ = 0;
}

namespace sha256_blocks {

void compress_portable(uint32_t state[8], const uint8_t* data, size_t blocks) {
    for (; blocks > 0; --blocks, data += 64) compress_one(state, data);
}

}  // namespace sha256_blocks

void Sha256::update(const void* data, size_t size_bytes) {
    const uint8_t* p = static_cast<const uint8_t*>(data);
    total_bytes_ += size_bytes;
    // Top up a partial block first.
    if (buffer_bytes_ > 0) {
        size_t take = std::min(size_bytes, 64 - buffer_bytes_);
        std::memcpy(buffer_.data() + buffer_bytes_, p, take);
        buffer_bytes_ += take;
        p += take;
        size_bytes -= take;
        if (buffer_bytes_ < 64) return;
        sha256_blocks::compress(state_.data(), buffer_.data(), 1);
        buffer_bytes_ = 0;
    }
    // Whole blocks straight from the caller's memory, all in one call.
    const size_t blocks = size_bytes / 64;
    sha256_blocks::compress(state_.data(), p, blocks);
    p += 64 * blocks;
    size_bytes -= 64 * blocks;
    // Keep the rest for later.
    if (size_bytes > 0) std::memcpy(buffer_.data(), p, size_bytes);
    buffer_bytes_ = size_bytes;
}

Sha256::Digest Sha256::digest() {
    // 5.1.1: append bit '1', zeros up to 56 mod 64 bytes, then the message length in bits, big-endian 64-bit.
    const uint64_t length_bits = total_bytes_ * 8;
    uint8_t padding[64] = {0x80};
    size_t pad_bytes = (buffer_bytes_ < 56) ? (56 - buffer_bytes_) : (120 - buffer_bytes_);  // 1..64
    uint8_t length_be[8];
    for (int i = 0; i < 8; i++) length_be[i] = static_cast<uint8_t>(length_bits >> (56 - 8 * i));
    update(padding, pad_bytes);  // 0x80 followed by zeros
    update(length_be, 8);

    Digest out;
    for (int i = 0; i < 8; i++) {
        out[4 * i + 0] = static_cast<uint8_t>(state_[i] >> 24);
        out[4 * i + 1] = static_cast<uint8_t>(state_[i] >> 16);
        out[4 * i + 2] = static_cast<uint8_t>(state_[i] >> 8);
        out[4 * i + 3] = static_cast<uint8_t>(state_[i]);
    }
    reset();
    return out;
}

std::string Sha256::hex(const Digest& digest) {
    static const char kHexDigits[] = "0123456789abcdef";
    std::string s;
    s.reserve(64);
    for (uint8_t byte : digest) {
        s.push_back(kHexDigits[byte >> 4]);
        s.push_back(kHexDigits[byte & 15]);
    }
    return s;
}

std::string Sha256::hex_of(const void* data, size_t size_bytes) {
    return hex_of(std::vector<std::string_view>{{static_cast<const char*>(data), size_bytes}});
}

std::string Sha256::hex_of(const std::vector<std::string_view>& pieces) {
    Sha256 h;
    for (const std::string_view piece : pieces)
        if (!piece.empty()) h.update(piece.data(), piece.size());  // an empty tensor's data may be null
    return hex(h.digest());
}

}  // namespace nb

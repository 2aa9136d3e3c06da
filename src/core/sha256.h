// Sha256: the SHA-256 hash of FIPS 180-4, written from the standard (its compression function on x86's SHA
// extensions where the CPU has them: src/core/sha256_blocks.h).
//
// Why: checkpoint manifests record a checksum per stage file, so a resumed run can tell a damaged or mismatched
// file from a good one. Streaming (update in pieces, then digest) so multi-GB files never need to sit in memory.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace nb {

class Sha256 {
public:
    using Digest = std::array<uint8_t, 32>;

    Sha256();

    // Feed bytes; may be called any number of times with any sizes.
    void update(const void* data, size_t size_bytes);

    // Pads, finishes and returns the 32-byte digest. The object is then reset, ready for a new message.
    Digest digest();

    // Lower-case hex, 64 characters.
    static std::string hex(const Digest& digest);

    // One-shot convenience: hex digest of a buffer, or of the concatenation of `pieces`.
    static std::string hex_of(const void* data, size_t size_bytes);
    static std::string hex_of(const std::vector<std::string_view>& pieces);

private:
    void reset();

    std::array<uint32_t, 8> state_;
    std::array<uint8_t, 64> buffer_;
    size_t buffer_bytes_ = 0;   // bytes waiting in buffer_, always < 64
    uint64_t total_bytes_ = 0;  // message length so far (the padding stores it in bits)
};

}  // namespace nb

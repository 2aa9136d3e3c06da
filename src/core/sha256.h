// Sha256: the SHA-256 hash of FIPS 180-4, computed by OpenSSL's libcrypto (its EVP interface; on x86's SHA
// extensions or AVX2 where the CPU has them). It replaced our own implementation: as fast where the CPU has SHA
// extensions, faster where it has not (docs/formats.md, "Checkpoint speed"), and kept by others.
//
// Why: checkpoint manifests record a checksum per stage file, so a resumed run can tell a damaged or mismatched
// file from a good one. Streaming (update in pieces, then digest) so multi-GB files never need to sit in memory.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

struct evp_md_ctx_st;  // OpenSSL's EVP_MD_CTX, kept out of this header

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

    struct ContextFree {
        void operator()(evp_md_ctx_st* ctx) const;
    };
    std::unique_ptr<evp_md_ctx_st, ContextFree> ctx_;
};

}  // namespace nb

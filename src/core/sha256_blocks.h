// SHA-256's compression function over whole 64-byte blocks (FIPS 180-4, 6.2.2), two ways: the portable one,
// written from the standard, and x86's SHA extensions (SHA-NI: Intel since Goldmont and Ice Lake, AMD since
// Zen), about five times faster. Sha256 (src/core/sha256.h) takes the fast one where the CPU has it: a
// checkpoint's sha256 runs over every byte it writes and reads, and the portable one hashes at about a fifth of
// a disk's write rate. The two give the same bits (tests/unit/test_sha256.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

namespace nb::sha256_blocks {

// 4.2.2: the first 32 bits of the fractional parts of the cube roots of the first 64 primes (16-byte aligned:
// the SHA extensions load them four at a time).
alignas(16) extern const uint32_t kRoundConstants[64];

// state: the eight working words H0..H7; `blocks` blocks of 64 bytes at `data`.
void compress_portable(uint32_t state[8], const uint8_t* data, size_t blocks);

// The SHA extensions' version; call it only where sha_extensions_available().
void compress_sha_extensions(uint32_t state[8], const uint8_t* data, size_t blocks);
bool sha_extensions_available();  // this CPU has SHA, SSSE3 and SSE4.1 (always false off x86)

// The fastest this CPU runs.
void compress(uint32_t state[8], const uint8_t* data, size_t blocks);

}  // namespace nb::sha256_blocks

// SHA-256's compression with x86's SHA extensions (sha256rnds2 does two rounds, sha256msg1/msg2 the message
// schedule), laid out as in Intel's white paper "Intel SHA Extensions" (Gulley et al., 2013): the state is kept as
// the register pair ABEF / CDGH that sha256rnds2 works on, each group of four rounds adds its four round
// constants to four message words, and the schedule for words 16..63 is computed four at a time, three groups
// ahead. Compiled for those instructions only in this function (a target attribute), so the rest of nobubble
// stays portable; sha_extensions_available() asks the CPU.
#include "src/core/sha256_blocks.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace nb::sha256_blocks {

#if defined(__x86_64__) || defined(__i386__)

__attribute__((target("sha,ssse3,sse4.1"))) void compress_sha_extensions(uint32_t state[8], const uint8_t* data,
                                                                         size_t blocks) {
    // The message words are big-endian: this shuffle swaps the bytes of each 32-bit lane.
    const __m128i byte_swap = _mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL);
    // H0..H3 = ABCD and H4..H7 = EFGH in memory; sha256rnds2 wants ABEF and CDGH.
    __m128i tmp = _mm_shuffle_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(&state[0])), 0xB1);  // CDAB
    __m128i cdgh = _mm_shuffle_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(&state[4])), 0x1B);  // EFGH
    __m128i abef = _mm_alignr_epi8(tmp, cdgh, 8);
    cdgh = _mm_blend_epi16(cdgh, tmp, 0xF0);

    for (; blocks > 0; --blocks, data += 64) {
        const __m128i abef_in = abef, cdgh_in = cdgh;
        __m128i w[4];  // the message words of groups g, g+1, g+2, g+3 (mod 4)
        for (int g = 0; g < 4; ++g)
            w[g] = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(data + 16 * g)), byte_swap);
#pragma GCC unroll 16
        for (int g = 0; g < 16; ++g) {  // rounds 4g .. 4g+3
            __m128i& cur = w[g % 4];
            __m128i& next = w[(g + 1) % 4];
            __m128i& prev = w[(g + 3) % 4];
            __m128i msg = _mm_add_epi32(cur, _mm_load_si128(reinterpret_cast<const __m128i*>(&kRoundConstants[4 * g])));
            cdgh = _mm_sha256rnds2_epu32(cdgh, abef, msg);
            if (g >= 3 && g <= 14) {  // the words of group g+1 (>= 4), from msg1's partial sums
                next = _mm_add_epi32(next, _mm_alignr_epi8(cur, prev, 4));
                next = _mm_sha256msg2_epu32(next, cur);
            }
            msg = _mm_shuffle_epi32(msg, 0x0E);
            abef = _mm_sha256rnds2_epu32(abef, cdgh, msg);
            if (g >= 1 && g <= 12) prev = _mm_sha256msg1_epu32(prev, cur);  // toward group g+3's words
        }
        abef = _mm_add_epi32(abef, abef_in);
        cdgh = _mm_add_epi32(cdgh, cdgh_in);
    }

    tmp = _mm_shuffle_epi32(abef, 0x1B);   // FEBA
    cdgh = _mm_shuffle_epi32(cdgh, 0xB1);  // DCHG
    _mm_storeu_si128(reinterpret_cast<__m128i*>(&state[0]), _mm_blend_epi16(tmp, cdgh, 0xF0));  // DCBA
    _mm_storeu_si128(reinterpret_cast<__m128i*>(&state[4]), _mm_alignr_epi8(cdgh, tmp, 8));     // HGFE
}

bool sha_extensions_available() {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
    const bool ssse3 = c & (1u << 9), sse41 = c & (1u << 19);
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    return ssse3 && sse41 && (b & (1u << 29));  // CPUID.(EAX=7, ECX=0):EBX bit 29 = SHA
}

#else

void compress_sha_extensions(uint32_t state[8], const uint8_t* data, size_t blocks) {
    compress_portable(state, data, blocks);  // never called: there are no SHA extensions here
}

bool sha_extensions_available() { return false; }

#endif

void compress(uint32_t state[8], const uint8_t* data, size_t blocks) {
    static const bool fast = sha_extensions_available();
    if (fast) compress_sha_extensions(state, data, blocks);
    else compress_portable(state, data, blocks);
}

}  // namespace nb::sha256_blocks

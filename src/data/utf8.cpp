// UTF-8 decoding with Python's replacement of ill-formed bytes (the table in src/data/utf8.h).
#include "src/data/utf8.h"

#include <cstdint>

namespace nb {

namespace {

bool is_continuation(uint8_t b) { return b >= 0x80 && b <= 0xBF; }

// The bounds of the second byte after a lead byte (table 3-7): narrower than 80..BF after E0, ED, F0 and F4.
struct SecondByteRange {
    uint8_t low, high;
};
SecondByteRange second_byte_range(uint8_t lead) {
    switch (lead) {
        case 0xE0: return {0xA0, 0xBF};
        case 0xED: return {0x80, 0x9F};
        case 0xF0: return {0x90, 0xBF};
        case 0xF4: return {0x80, 0x8F};
        default: return {0x80, 0xBF};
    }
}

// The length of a well-formed sequence that starts with `lead`, 0 for a byte that starts none.
size_t sequence_length(uint8_t lead) {
    if (lead < 0x80) return 1;
    if (lead >= 0xC2 && lead <= 0xDF) return 2;
    if (lead >= 0xE0 && lead <= 0xEF) return 3;
    if (lead >= 0xF0 && lead <= 0xF4) return 4;
    return 0;
}

}  // namespace

DecodedCodePoint decode_utf8_at(std::string_view text, size_t pos) {
    const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
    const uint8_t lead = byte(pos);
    const size_t length = sequence_length(lead);
    if (length == 1) return {lead, 1, true};
    if (length == 0) return {kReplacementCharacter, 1, false};
    // The lead's payload bits, then 6 bits per continuation byte; stop at the first byte that does not fit.
    char32_t cp = lead & (0xFF >> (length + 1));
    const SecondByteRange second = second_byte_range(lead);
    for (size_t k = 1; k < length; ++k) {
        if (pos + k >= text.size()) return {kReplacementCharacter, k, false};
        const uint8_t b = byte(pos + k);
        const bool fits = k == 1 ? (b >= second.low && b <= second.high) : is_continuation(b);
        if (!fits) return {kReplacementCharacter, k, false};  // the maximal subpart: lead plus k - 1 fitting bytes
        cp = (cp << 6) | (b & 0x3F);
    }
    return {cp, length, true};
}

std::string replace_invalid_utf8(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    size_t pos = 0;
    while (pos < text.size()) {
        const DecodedCodePoint d = decode_utf8_at(text, pos);
        if (d.valid) {
            out.append(text.substr(pos, d.length));
        } else {
            append_utf8(out, kReplacementCharacter);
        }
        pos += d.length;
    }
    return out;
}

void append_utf8(std::string& out, char32_t cp) {
    if (cp < 0x80) {
        out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
        out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
        out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
}

}  // namespace nb

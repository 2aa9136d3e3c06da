// GPT-2's byte-to-unicode table (src/data/byte_level_alphabet.h), built once.
#include "src/data/byte_level_alphabet.h"

#include <array>

#include "src/data/utf8.h"

namespace nb {

namespace {

bool keeps_its_code_point(int b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE; }

std::array<char32_t, 256> make_byte_table() {
    std::array<char32_t, 256> table{};
    char32_t next_free = 0x100;
    for (int b = 0; b < 256; ++b) table[b] = keeps_its_code_point(b) ? static_cast<char32_t>(b) : next_free++;
    return table;
}

const std::array<char32_t, 256>& byte_table() {
    static const std::array<char32_t, 256> table = make_byte_table();
    return table;
}

// The inverse: code points U+0000..U+0143 to their byte, -1 where none.
std::array<int16_t, 0x144> make_inverse_table() {
    std::array<int16_t, 0x144> inverse;
    inverse.fill(-1);
    for (int b = 0; b < 256; ++b) inverse[byte_table()[b]] = static_cast<int16_t>(b);
    return inverse;
}

}  // namespace

char32_t byte_to_unicode(uint8_t b) { return byte_table()[b]; }

std::optional<std::string> byte_level_token_bytes(std::string_view token) {
    static const std::array<int16_t, 0x144> inverse = make_inverse_table();
    std::string bytes;
    for (size_t pos = 0; pos < token.size();) {
        const DecodedCodePoint d = decode_utf8_at(token, pos);
        if (!d.valid || d.cp >= inverse.size() || inverse[d.cp] < 0) return std::nullopt;
        bytes.push_back(static_cast<char>(inverse[d.cp]));
        pos += d.length;
    }
    return bytes;
}

}  // namespace nb

// UTF-8 for the tokenizer (src/data/bpe_tokenizer.h): bytes to code points, invalid bytes replaced as Python does.
//
// Well-formed UTF-8 (Unicode 15, table 3-7), by lead byte:
//   00..7F                       one byte
//   C2..DF  80..BF               two
//   E0      A0..BF  80..BF       three (E0 80..9F would be an overlong form)
//   E1..EC  80..BF  80..BF
//   ED      80..9F  80..BF       (ED A0..BF would be a surrogate, U+D800..U+DFFF)
//   EE..EF  80..BF  80..BF
//   F0      90..BF  80..BF 80..BF   four (F0 80..8F overlong)
//   F1..F3  80..BF  80..BF 80..BF
//   F4      80..8F  80..BF 80..BF   (above U+10FFFF otherwise)
// Anything else is replaced by U+FFFD, one per "maximal subpart" (Unicode 15, 3.9, U+FFFD substitution): a lead
// byte followed by as many bytes as still fit one of the rows above, but not a whole row, is ONE U+FFFD; a byte
// that starts no row (80..BF alone, C0, C1, F5..FF) is one U+FFFD. This is exactly Python's
// bytes.decode("utf-8", "replace") and Rust's String::from_utf8_lossy, so that the text we tokenize is the text
// Hugging Face tokenizers is given: e.g. E2 82 41 -> U+FFFD 'A' (one replacement for the two bytes), C0 AF ->
// U+FFFD U+FFFD, ED A0 80 -> three U+FFFD.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace nb {

constexpr char32_t kReplacementCharacter = 0xFFFD;

// The code point that starts at text[pos] and its length in bytes (1..4); for an ill-formed start, U+FFFD and the
// length of the maximal subpart it replaces (>= 1). pos < text.size().
struct DecodedCodePoint {
    char32_t cp;
    size_t length;
    bool valid;  // false: cp is the U+FFFD that replaces `length` ill-formed bytes
};
DecodedCodePoint decode_utf8_at(std::string_view text, size_t pos);

// The text with each maximal ill-formed subpart replaced by U+FFFD (EF BF BD); well-formed text is returned as is.
std::string replace_invalid_utf8(std::string_view text);

// cp as UTF-8, appended to out (cp a Unicode scalar value).
void append_utf8(std::string& out, char32_t cp);

}  // namespace nb

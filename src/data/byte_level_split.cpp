// The byte-level pre-tokenizer (the steps in src/data/byte_level_split.h). GPT-2's pattern is matched by hand: each
// alternative is a run of one character class, so a match is found by looking at classes, not by a regex engine.
#include "src/data/byte_level_split.h"

#include <cstdint>

#include "src/data/unicode_classes.h"
#include "src/data/utf8.h"

namespace nb {

namespace {

// The four classes GPT-2's pattern tells apart; every code point is in exactly one (\s, \p{L} and \p{N} are
// disjoint).
enum class CharClass : uint8_t { letter, number, space, other };

CharClass classify(char32_t cp) {
    if (cp < 0x80) {  // ASCII, the common case, without a table search
        if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) return CharClass::letter;
        if (cp >= '0' && cp <= '9') return CharClass::number;
        if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D)) return CharClass::space;
        return CharClass::other;
    }
    if (is_unicode_white_space(cp)) return CharClass::space;
    if (is_unicode_letter(cp)) return CharClass::letter;
    if (is_unicode_number(cp)) return CharClass::number;
    return CharClass::other;
}

// A text as code points: each one's value, class and byte offset (offset[n] = the text's size).
struct CodePoints {
    std::vector<char32_t> cp;
    std::vector<CharClass> cls;
    std::vector<size_t> offset;
    size_t size() const { return cp.size(); }
};

CodePoints decode_code_points(std::string_view text) {
    CodePoints t;
    for (size_t pos = 0; pos < text.size();) {
        const DecodedCodePoint d = decode_utf8_at(text, pos);
        t.cp.push_back(d.cp);
        t.cls.push_back(classify(d.cp));
        t.offset.push_back(pos);
        pos += d.length;
    }
    t.offset.push_back(text.size());
    return t;
}

// 's|'t|'re|'ve|'m|'ll|'d at i: its length in code points, or 0.
size_t contraction_length(const CodePoints& t, size_t i) {
    if (t.cp[i] != U'\'' || i + 1 >= t.size()) return 0;
    const char32_t first = t.cp[i + 1];
    if (first == U's' || first == U't' || first == U'm' || first == U'd') return 2;
    const char32_t second = i + 2 < t.size() ? t.cp[i + 2] : 0;
    if ((first == U'r' || first == U'v') && second == U'e') return 3;
    if (first == U'l' && second == U'l') return 3;
    return 0;
}

// ` ?C+` at i for the class C: an optional ' ' then at least one code point of class C; its length, or 0.
size_t class_run_length(const CodePoints& t, size_t i, CharClass c) {
    const size_t start = t.cp[i] == U' ' ? i + 1 : i;
    size_t end = start;
    while (end < t.size() && t.cls[end] == c) ++end;
    return end > start ? end - i : 0;
}

// `\s+(?!\S)|\s+` at i: the white space run, less its last code point when a non-space follows it and the run is
// longer than one (that last space then starts the next word, " ?\p{L}+" and its siblings); its length, or 0.
size_t white_space_length(const CodePoints& t, size_t i) {
    size_t end = i;
    while (end < t.size() && t.cls[end] == CharClass::space) ++end;
    const size_t run = end - i;
    if (end < t.size() && run >= 2) return run - 1;  // \s+(?!\S), backtracked by one
    return run;                                      // at the end (?!\S) holds; a single space: \s+
}

// The first alternative of GPT-2's pattern that matches at i, in the pattern's order: its length (>= 1).
size_t gpt2_match_length(const CodePoints& t, size_t i) {
    if (const size_t n = contraction_length(t, i)) return n;
    if (const size_t n = class_run_length(t, i, CharClass::letter)) return n;
    if (const size_t n = class_run_length(t, i, CharClass::number)) return n;
    if (const size_t n = class_run_length(t, i, CharClass::other)) return n;
    return white_space_length(t, i);  // t.cls[i] is space here: every other class matched above
}

}  // namespace

std::vector<std::string_view> split_gpt2_pattern(std::string_view text) {
    const CodePoints t = decode_code_points(text);
    std::vector<std::string_view> words;
    for (size_t i = 0; i < t.size();) {
        const size_t n = gpt2_match_length(t, i);
        words.push_back(text.substr(t.offset[i], t.offset[i + n] - t.offset[i]));
        i += n;
    }
    return words;
}

std::vector<std::string_view> split_digits(std::string_view text, DigitsSplit mode) {
    std::vector<std::string_view> words;
    size_t word_start = 0;
    bool in_number_run = false;
    const auto cut = [&](size_t pos) {
        if (pos > word_start) words.push_back(text.substr(word_start, pos - word_start));
        word_start = pos;
    };
    for (size_t pos = 0; pos < text.size();) {
        const DecodedCodePoint d = decode_utf8_at(text, pos);
        const bool number = is_rust_numeric(d.cp);
        // A cut before a number that is its own word or starts a run, and before the first code point after a run.
        if ((number && (mode == DigitsSplit::individual || !in_number_run)) || (!number && in_number_run)) cut(pos);
        in_number_run = number;
        pos += d.length;
    }
    cut(text.size());
    return words;
}

void ByteLevelPreTokenizer::split(std::string_view text, std::vector<std::string>& words) const {
    std::vector<std::string_view> pieces{text};
    for (const DigitsSplit mode : digits) {
        std::vector<std::string_view> finer;
        for (const std::string_view piece : pieces)
            for (const std::string_view part : split_digits(piece, mode)) finer.push_back(part);
        pieces = std::move(finer);
    }
    std::string word;
    for (const std::string_view piece : pieces) {
        if (piece.empty()) continue;  // tokenizers drops empty pieces before ByteLevel sees them
        word.clear();
        if (add_prefix_space && piece.front() != ' ') word.push_back(' ');
        word.append(piece);
        if (!use_regex) {
            words.push_back(word);
            continue;
        }
        for (const std::string_view part : split_gpt2_pattern(word)) words.emplace_back(part);
    }
}

}  // namespace nb

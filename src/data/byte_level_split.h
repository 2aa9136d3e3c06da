// The pre-tokenizer of a byte-level BPE (Hugging Face tokenizers' ByteLevel, optionally after Digits): how a piece
// of text is cut into the words that BPE then merges one at a time (src/data/bpe_tokenizer.h).
//
// Steps, in the order tokenizers runs them on each piece of text between added tokens:
//   1. Digits (optional, any number of them): every number its own word (individual_digits = true) or every run
//      of numbers one word (false); the text between is a word too. A number is what Rust's char::is_numeric says
//      (tokenizers calls it): \p{N} of Unicode 15, three sets of digits more than the regex's \p{N}
//      (src/data/unicode_classes.h).
//   2. ByteLevel, on each word of step 1:
//      a. add_prefix_space: a word that does not start with ' ' gets one in front (so "Hello" and " Hello" encode
//         alike at the start of a text);
//      b. use_regex: the word is cut by GPT-2's pattern, every match its own word (leftmost first, as a backtracking
//         regex engine takes alternatives in order):
//             's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//         i.e. an English contraction (lower case only: "'S" is punctuation then a letter); a run of letters, of
//         numbers or of other symbols, each with at most one ' ' in front; a run of white space that leaves its last
//         character to the word after it (so " world" keeps its space); any remaining white space.
//         Every code point is a letter, a number, white space or other, so the matches tile the word.
//   3. (in bpe_tokenizer.cpp) each word's UTF-8 bytes are merged by BPE; the byte-to-unicode renaming of ByteLevel
//      (src/data/byte_level_alphabet.h) is only how tokenizer.json spells the bytes, so we merge the bytes directly.
// Words are never empty. The classes \p{L}, \p{N}, \s: src/data/unicode_classes.h.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace nb {

enum class DigitsSplit { individual, contiguous };

// The pre-tokenizer steps a tokenizer.json asked for.
struct ByteLevelPreTokenizer {
    std::vector<DigitsSplit> digits;  // the Digits steps before ByteLevel, in order (none for GPT-2)
    bool add_prefix_space = false;
    bool use_regex = true;

    // The words of `text` (well-formed UTF-8), in order, appended to `words`: their bytes, the prefix space
    // included.
    void split(std::string_view text, std::vector<std::string>& words) const;
};

// Step 1: `text` cut before and after every number (is_rust_numeric; individual) or run of them (contiguous);
// views into text, none empty.
std::vector<std::string_view> split_digits(std::string_view text, DigitsSplit mode);

// Step 2b: `text` cut by GPT-2's pattern; views into text, none empty.
std::vector<std::string_view> split_gpt2_pattern(std::string_view text);

}  // namespace nb

// Added tokens (tokenizer.json's "added_tokens": "<|endoftext|>", chat markers, ...): found in the text before any
// pre-tokenization, each one its own id, never cut or merged. As Hugging Face tokenizers' AddedVocabulary:
//   1. the tokens with normalized = false are searched in the whole text; then the tokens with normalized = true
//      in the pieces of text between the matches of step 1 (with no normalizer the text is the same; only the
//      order differs: step 1's tokens take precedence);
//   2. each search is leftmost-longest (Aho-Corasick's LeftmostLongest): scanning from the left, the first
//      position where some token starts, the longest token there; the next search starts after it;
//   3. lstrip: the white space (the White_Space property) before a match joins it, back to the previous match;
//      rstrip: the white space after it joins it. (The joined spaces are part of the added token's piece, so they
//      produce no ids of their own.)
//   4. empty pieces between matches are dropped.
// single_word = true is not implemented (BpeTokenizer::load refuses it).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace nb {

struct AddedToken {
    std::string content;
    int32_t id = 0;
    bool lstrip = false, rstrip = false, normalized = false;
};

// A piece of the text: an added token's id, or text for the pre-tokenizer (id -1).
struct TextSegment {
    std::string_view text;
    int32_t id = -1;
};

class AddedTokenSplitter {
public:
    explicit AddedTokenSplitter(const std::vector<AddedToken>& tokens);

    // text cut at the added tokens (steps 1-4); views into text.
    std::vector<TextSegment> split(std::string_view text) const;

private:
    // One search (step 2) over a set of tokens, bucketed by their first byte, longest first.
    struct TokenSet {
        std::vector<AddedToken> tokens;
        std::array<std::vector<int32_t>, 256> by_first_byte;
        void index();
        const AddedToken* longest_at(std::string_view text, size_t pos) const;
    };
    static void split_with(const TokenSet& set, std::string_view text, std::vector<TextSegment>& out);

    TokenSet not_normalized_, normalized_;
};

}  // namespace nb

// A byte-level BPE tokenizer read from a Hugging Face tokenizer.json (GPT-2's kind, SmolLM's, the ones
// run/prepare_tokens.py trains), giving the ids `tokenizers` gives, id for id: encode(text) equals
// tokenizer.encode(text, add_special_tokens=False).ids, decode(ids) the bytes behind decode(ids,
// skip_special_tokens=False). Used by `nobubble tokenize` (src/cli/tokenize_command.cpp).
//
// Encoding, step by step (each step in its own file):
//   0. ill-formed UTF-8 in the input: each maximal ill-formed subpart becomes U+FFFD, as Python's
//      bytes.decode("utf-8", "replace") does (src/data/utf8.h); so encode(bytes) equals tokenizers' encode of
//      bytes.decode("utf-8", "replace");
//   1. added tokens ("<|endoftext|>", ...) are cut out of the text first, each its own id (src/data/added_tokens.h);
//   2. the rest is cut into words by the pre-tokenizer: Digits (optional), then ByteLevel's prefix space and GPT-2's
//      pattern (src/data/byte_level_split.h);
//   3. each word's bytes start as one symbol per byte and are merged by the BPE merges, lowest rank first
//      (src/data/bpe_merges.h). With ignore_merges, a word that is itself in the vocabulary is that one id.
//      A byte missing from the vocabulary becomes unk_token (fused with its neighbours when fuse_unk) or, with no
//      unk_token, is dropped, as tokenizers does.
// Decoding: each id's token, spelled in GPT-2's byte alphabet (src/data/byte_level_alphabet.h), back to its bytes;
// a token with a character outside that alphabet (an added token such as "<|im start|>") as its own UTF-8; the bytes
// are returned raw (tokenizers then replaces ill-formed UTF-8 by U+FFFD; we leave that to the caller).
//
// What is implemented, and refused by name otherwise (one nb::UsageError line naming the file):
//   model         BPE: vocab, merges as "a b" strings or ["a", "b"] pairs, ignore_merges, unk_token, fuse_unk;
//                 dropout null (or 0), byte_fallback false, continuing_subword_prefix and end_of_word_suffix null
//   normalizer    null (or an empty Sequence)
//   pre_tokenizer ByteLevel (add_prefix_space, use_regex), or a Sequence of Digits (individual_digits) steps then
//                 one ByteLevel; Split and the others are refused
//   decoder       ByteLevel
//   added_tokens  lstrip, rstrip, normalized honoured; single_word = true refused
//   truncation, padding null; post_processor ignored (add_special_tokens=False adds nothing, and ByteLevel's only
//                 changes offsets)
// encode is const and keeps no state between calls (a cache of encoded words lives for one call): safe to call
// from several threads.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "src/data/added_tokens.h"
#include "src/data/bpe_merges.h"
#include "src/data/byte_level_split.h"

namespace nb {

class BpeTokenizer {
public:
    // Reads a Hugging Face tokenizer.json; nb::UsageError, one line naming the file and the problem, for a missing
    // file, text that is not JSON, a model that is not BPE, a BPE without byte-level pre-tokenization or decoding,
    // or a part (normalizer, pre-tokenizer, flag) not implemented.
    static BpeTokenizer load(const std::string& path);

    int64_t vocab_size() const { return static_cast<int64_t>(id_bytes_.size()); }  // highest id + 1
    std::optional<int32_t> token_id(std::string_view token) const;  // as tokenizer.json spells it: "<|endoftext|>"

    std::vector<int32_t> encode(std::string_view utf8_text) const;
    // The bytes of the ids' tokens, concatenated; nb::UsageError for an id that names no token.
    std::string decode(std::span<const int32_t> ids) const;

private:
    using WordCache = std::unordered_map<std::string, std::vector<int32_t>>;
    BpeTokenizer() : added_(std::vector<AddedToken>{}) {}
    void encode_word(const std::string& word, WordCache& cache, std::vector<int32_t>& ids) const;
    std::vector<int32_t> merge_word(std::string_view word) const;

    std::unordered_map<std::string, int32_t> token_ids_;  // every token as tokenizer.json spells it (added ones win)
    std::vector<std::optional<std::string>> id_bytes_;    // what decode writes for each id (nothing: no such id)
    std::unordered_map<std::string, int32_t> word_ids_;   // the model's tokens by their bytes (for ignore_merges)
    std::array<int32_t, 256> byte_ids_{};                 // the model's id of each single byte, -1 where none
    BpeMerges merges_;
    ByteLevelPreTokenizer pre_tokenizer_;
    AddedTokenSplitter added_;
    bool ignore_merges_ = false;
    std::optional<int32_t> unk_id_;
    bool fuse_unk_ = false;

    friend class BpeTokenizerReader;
};

}  // namespace nb

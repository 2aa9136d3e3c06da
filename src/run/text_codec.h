// TextCodec: how text becomes a model's token ids and back, for `nobubble generate` and the samples `train` prints.
//   - a model with a tokenizer (a checkpoint's copy, a folder's tokenizer.json, or --tokenizer): its byte-level BPE
//     in C++ (src/data/bpe_tokenizer.h; id for id equal to Hugging Face `tokenizers`, tested), so generation needs
//     no Python;
//   - a model without one reads bytes: each byte of the text is its id, each id below 256 one byte; an id past 255
//     (a larger vocabulary with no tokenizer) decodes as <|id|>.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "src/data/bpe_tokenizer.h"
#include "src/data/tokenizer_file.h"

namespace nb {

class TextCodec {
public:
    // Bytes where `tokenizer` is none; else its file's BPE. nb::UsageError when the tokenizer has more ids than
    // `model_vocab_size` (a model cannot read them), naming both.
    static TextCodec for_model(const std::optional<TokenizerFile>& tokenizer, int64_t model_vocab_size);

    std::vector<int32_t> encode(std::string_view text) const;
    std::string decode(std::span<const int32_t> ids) const;
    // "<|endoftext|>"'s id, where the tokenizer has one (bytes: none).
    std::optional<int32_t> end_of_text() const { return end_of_text_; }
    std::string describe() const;  // "bytes", or "PATH (N ids)"

private:
    std::shared_ptr<const BpeTokenizer> bpe_;  // null: bytes
    std::string path_;
    std::optional<int32_t> end_of_text_;
};

}  // namespace nb

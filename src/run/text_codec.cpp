#include "src/run/text_codec.h"

#include <fmt/format.h>

#include "src/core/error.h"

namespace nb {

TextCodec TextCodec::for_model(const std::optional<TokenizerFile>& tokenizer, int64_t model_vocab_size) {
    TextCodec codec;
    if (!tokenizer) return codec;
    auto bpe = std::make_shared<const BpeTokenizer>(BpeTokenizer::load(tokenizer->path));
    if (bpe->vocab_size() > model_vocab_size)
        throw UsageError(fmt::format("the tokenizer {} has {} ids but the model's vocab_size is {}", tokenizer->path,
                                     bpe->vocab_size(), model_vocab_size));
    codec.end_of_text_ = bpe->token_id(kEndOfText);
    codec.bpe_ = std::move(bpe);
    codec.path_ = tokenizer->path;
    return codec;
}

std::vector<int32_t> TextCodec::encode(std::string_view text) const {
    if (bpe_) return bpe_->encode(text);
    return {reinterpret_cast<const unsigned char*>(text.data()),
            reinterpret_cast<const unsigned char*>(text.data()) + text.size()};
}

std::string TextCodec::decode(std::span<const int32_t> ids) const {
    if (bpe_) return bpe_->decode(ids);
    std::string out;
    for (int32_t id : ids) out += id >= 0 && id < 256 ? std::string(1, static_cast<char>(id)) : fmt::format("<|{}|>", id);
    return out;
}

std::string TextCodec::describe() const {
    return bpe_ ? fmt::format("{} ({} ids)", path_, bpe_->vocab_size()) : "bytes";
}

}  // namespace nb

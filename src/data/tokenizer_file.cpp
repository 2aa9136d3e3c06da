#include "src/data/tokenizer_file.h"

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "src/core/atomic_file.h"
#include "src/core/error.h"
#include "src/core/json_reader.h"
#include "src/core/sha256.h"
#include "src/data/token_files.h"

namespace nb {

namespace fs = std::filesystem;

namespace {

[[noreturn]] void not_a_tokenizer(const std::string& path, const std::string& why) {
    throw UsageError(fmt::format("tokenizer '{}' is not a Hugging Face tokenizer.json: {}", path, why));
}

// An id of the tokenizer: a non-negative integer.
int64_t id_of(const Json& value, const std::string& path, const std::string& what) {
    if (!value.is_number_integer() || value.get<int64_t>() < 0)
        not_a_tokenizer(path, fmt::format("{} is {}, not an id", what, printable(value.dump(), 60)));
    return value.get<int64_t>();
}

}  // namespace

TokenizerFile read_tokenizer_file(const std::string& path) {
    std::error_code ec;
    if (!fs::is_regular_file(path, ec))
        throw UsageError(fmt::format("tokenizer '{}': {}", path,
                                     fs::exists(path, ec) ? "not a file" : "no such file"));
    std::string bytes;
    Json top;
    try {
        bytes = read_whole_file(path);
        top = read_json(bytes, path);
    } catch (const RuntimeError& e) {
        throw UsageError(fmt::format("tokenizer: {}", e.what()));  // the reader's line names the file
    }
    const auto model = top.is_object() ? top.find("model") : top.end();
    if (!top.is_object() || model == top.end() || !model->is_object()) not_a_tokenizer(path, "no \"model\" object");
    const auto vocab = model->find("vocab");
    if (vocab == model->end()) not_a_tokenizer(path, "its \"model\" has no \"vocab\"");
    TokenizerFile t{path, Sha256::hex_of(bytes.data(), bytes.size()), 0, std::nullopt};
    const auto saw = [&t](int64_t id, const std::string& token) {
        t.vocab_size = std::max(t.vocab_size, id + 1);
        if (token == kEndOfText) t.eot_id = static_cast<int32_t>(id);
    };
    if (vocab->is_object()) {  // BPE, WordPiece, WordLevel: {token: id}
        for (const auto& [token, id] : vocab->items()) saw(id_of(id, path, fmt::format("vocab[\"{}\"]", token)), token);
    } else if (vocab->is_array()) {  // Unigram: [[piece, score], ...], the id its place
        for (size_t i = 0; i < vocab->size(); ++i) {
            const Json& piece = (*vocab)[i];
            saw(static_cast<int64_t>(i), piece.is_array() && !piece.empty() && piece[0].is_string()
                                             ? piece[0].get<std::string>() : std::string());
        }
    } else {
        not_a_tokenizer(path, fmt::format("its \"model\".\"vocab\" is {}", json_kind(*vocab)));
    }
    if (const auto added = top.find("added_tokens"); added != top.end() && !added->is_null()) {
        if (!added->is_array()) not_a_tokenizer(path, fmt::format("\"added_tokens\" is {}", json_kind(*added)));
        for (const Json& token : *added) {
            if (!token.is_object() || !token.contains("id") || !token.contains("content") ||
                !token["content"].is_string())
                not_a_tokenizer(path, "an entry of \"added_tokens\" lacks its \"id\" or \"content\"");
            saw(id_of(token["id"], path, "an added token's id"), token["content"].get<std::string>());
        }
    }
    if (t.vocab_size == 0) not_a_tokenizer(path, "it has no ids");
    return t;
}

std::string read_tokenizer_bytes(const TokenizerFile& tokenizer) {
    std::string bytes = read_whole_file(tokenizer.path);
    if (Sha256::hex_of(bytes.data(), bytes.size()) != tokenizer.sha256)
        throw RuntimeError(fmt::format("tokenizer '{}' changed since it was read: its sha256 is no longer {}",
                                       tokenizer.path, tokenizer.sha256));
    return bytes;
}

std::optional<TokenizerFile> tokenizer_of_data(const std::string& given, const std::string& data_path) {
    if (!given.empty()) return read_tokenizer_file(given);
    if (data_path.empty() || token_format_of(data_path) != TokenFormat::llmc_shard) return std::nullopt;
    const fs::path beside = fs::path(data_path).parent_path() / kTokenizerFileName;
    std::error_code ec;
    if (!fs::exists(beside, ec)) return std::nullopt;
    return read_tokenizer_file(beside.string());
}

}  // namespace nb

// Reading tokenizer.json into a BpeTokenizer, and encode/decode (the steps in src/data/bpe_tokenizer.h).
#include "src/data/bpe_tokenizer.h"

#include <cstdint>
#include <filesystem>
#include <system_error>

#include <fmt/format.h>

#include "src/core/atomic_file.h"
#include "src/core/error.h"
#include "src/core/json_reader.h"
#include "src/data/byte_level_alphabet.h"
#include "src/data/utf8.h"

namespace nb {

namespace {

// Encoded words kept per encode call: a text repeats its words, so most are merged once. Bounded, as an attacker's
// text of unique words would otherwise grow it without limit.
constexpr size_t kWordCacheEntries = 1 << 16;

// A field that may be absent or null (tokenizers then takes its default): nullptr in both cases.
const Json* optional_field(const Json& object, const char* key) {
    const auto it = object.find(key);
    return it == object.end() || it->is_null() ? nullptr : &*it;
}

}  // namespace

// The parse of one tokenizer.json, one part per method; every refusal names the file (UsageError).
class BpeTokenizerReader {
public:
    BpeTokenizerReader(const std::string& path, const Json& json) : path_(path), json_(json) {}

    BpeTokenizer read() {
        json_object(json_, path_, "the tokenizer");
        const Json& model = json_object(json_at(json_, "model", path_), path_, "model");
        check_model_kind(model);
        check_unsupported_top_level();
        read_pre_tokenizer();
        check_decoder();
        read_model(model);
        read_added_tokens();
        return std::move(tok_);
    }

private:
    [[noreturn]] void refuse(const std::string& what) const {
        throw UsageError(fmt::format("tokenizer '{}': {}", path_, what));
    }
    const std::string& type_of(const Json& part, const char* what) const {
        return json_string(json_at(json_object(part, path_, what), "type", path_), path_, std::string(what) + ".type");
    }
    bool flag(const Json& object, const char* key, bool default_value) const {
        const Json* v = optional_field(object, key);
        return v == nullptr ? default_value : json_bool(*v, path_, key);
    }
    int32_t token_id_value(const Json& value, const std::string& what) const {
        const int64_t id = json_int64(value, path_, what);
        if (id < 0 || id > INT32_MAX) refuse(fmt::format("{} has id {}, outside 0..{}", what, id, INT32_MAX));
        return static_cast<int32_t>(id);
    }

    void check_model_kind(const Json& model) const {
        const std::string& kind = type_of(model, "model");
        if (kind != "BPE")
            throw UsageError(fmt::format("tokenizer '{}' is a {} tokenizer: a byte-level BPE is needed", path_,
                                         printable(kind)));
    }

    void check_unsupported_top_level() const {
        for (const char* key : {"truncation", "padding"})
            if (optional_field(json_, key) != nullptr)
                refuse(fmt::format("{} is set; nobubble's tokenizer implements neither truncation nor padding", key));
        if (const Json* n = optional_field(json_, "normalizer")) {
            const std::string& kind = type_of(*n, "normalizer");
            const bool empty_sequence =
                kind == "Sequence" && n->contains("normalizers") && (*n)["normalizers"].is_array() &&
                (*n)["normalizers"].empty();
            if (!empty_sequence)
                refuse(fmt::format("normalizer {} is not implemented (a byte-level BPE without a normalizer is "
                                   "needed)", printable(kind)));
        }
    }

    // ByteLevel, or a Sequence of Digits steps ending in one ByteLevel.
    void read_pre_tokenizer() {
        const Json* p = optional_field(json_, "pre_tokenizer");
        const auto no_byte_level = [&] {
            throw UsageError(fmt::format("tokenizer '{}' is a BPE without byte-level pre-tokenization: a byte-level "
                                         "BPE is needed", path_));
        };
        if (p == nullptr) no_byte_level();
        std::vector<const Json*> steps{p};
        if (type_of(*p, "pre_tokenizer") == "Sequence") {
            steps.clear();
            for (const Json& step : json_array(json_at(*p, "pretokenizers", path_), path_, "pretokenizers"))
                steps.push_back(&step);
        }
        if (steps.empty() || type_of(*steps.back(), "pre_tokenizer") != "ByteLevel") {
            for (const Json* step : steps) check_pre_tokenizer_kind(type_of(*step, "pre_tokenizer"));
            no_byte_level();
        }
        for (size_t i = 0; i + 1 < steps.size(); ++i) {
            const std::string& kind = type_of(*steps[i], "pre_tokenizer");
            if (kind != "Digits") {
                check_pre_tokenizer_kind(kind);
                refuse(fmt::format("pre-tokenizer {} before ByteLevel is not implemented (only Digits)", kind));
            }
            const bool individual = flag(*steps[i], "individual_digits", false);
            tok_.pre_tokenizer_.digits.push_back(individual ? DigitsSplit::individual : DigitsSplit::contiguous);
        }
        tok_.pre_tokenizer_.add_prefix_space = flag(*steps.back(), "add_prefix_space", true);
        tok_.pre_tokenizer_.use_regex = flag(*steps.back(), "use_regex", true);
    }

    void check_pre_tokenizer_kind(const std::string& kind) const {
        if (kind != "ByteLevel" && kind != "Digits")
            refuse(fmt::format("pre-tokenizer {} is not implemented (ByteLevel, or a Sequence of Digits then "
                               "ByteLevel)", printable(kind)));
    }

    void check_decoder() const {
        const Json* d = optional_field(json_, "decoder");
        const std::string kind = d == nullptr ? "null" : type_of(*d, "decoder");
        if (kind != "ByteLevel")
            refuse(fmt::format("decoder {} is not implemented: a byte-level BPE decodes with ByteLevel",
                               printable(kind)));
    }

    void check_model_flags(const Json& model) const {
        if (const Json* d = optional_field(model, "dropout"); d != nullptr && json_number(*d, path_, "dropout") != 0)
            refuse("BPE dropout is not implemented (dropout must be null)");
        if (flag(model, "byte_fallback", false)) refuse("BPE byte_fallback is not implemented (a byte-level BPE)");
        for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
            if (const Json* v = optional_field(model, key); v != nullptr && !json_string(*v, path_, key).empty())
                refuse(fmt::format("BPE {} is not implemented (it must be null)", key));
    }

    void read_model(const Json& model) {
        check_model_flags(model);
        tok_.ignore_merges_ = flag(model, "ignore_merges", false);
        tok_.fuse_unk_ = flag(model, "fuse_unk", false);
        tok_.byte_ids_.fill(-1);
        for (const auto& [token, value] : json_object(json_at(model, "vocab", path_), path_, "vocab").items())
            add_model_token(token, token_id_value(value, fmt::format("vocab token '{}'", printable(token))));
        if (const Json* unk = optional_field(model, "unk_token")) {
            const std::string& name = json_string(*unk, path_, "unk_token");
            const auto it = tok_.token_ids_.find(name);
            if (it == tok_.token_ids_.end()) refuse(fmt::format("unk_token '{}' is not in the vocab", printable(name)));
            tok_.unk_id_ = it->second;
        }
        read_merges(json_array(json_at(model, "merges", path_), path_, "merges"));
    }

    void add_model_token(const std::string& token, int32_t id) {
        tok_.token_ids_[token] = id;
        set_id_bytes(token, id);
        if (const auto bytes = byte_level_token_bytes(token)) {
            tok_.word_ids_[*bytes] = id;
            if (bytes->size() == 1) tok_.byte_ids_[static_cast<uint8_t>((*bytes)[0])] = id;
        }
    }

    // What decode writes for the id: ByteLevel's decoder maps every character of the token back to its byte, or,
    // when one is not in the byte alphabet, keeps the token's own UTF-8.
    void set_id_bytes(const std::string& token, int32_t id) {
        if (static_cast<size_t>(id) >= tok_.id_bytes_.size()) tok_.id_bytes_.resize(static_cast<size_t>(id) + 1);
        tok_.id_bytes_[id] = byte_level_token_bytes(token).value_or(token);
    }

    // Each merge as "a b" (a line of merges.txt: split at its one space) or ["a", "b"]; rank = its index.
    void read_merges(const Json& merges) {
        for (size_t rank = 0; rank < merges.size(); ++rank) {
            const Json& m = merges[rank];
            const std::string what = fmt::format("merges[{}]", rank);
            std::string a, b;
            if (m.is_string()) {
                const std::string& line = m.get_ref<const std::string&>();
                const size_t space = line.find(' ');
                if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos)
                    refuse(fmt::format("{} = '{}' is not two tokens separated by one space", what, printable(line)));
                a = line.substr(0, space);
                b = line.substr(space + 1);
            } else {
                const Json& pair = json_array(m, path_, what);
                if (pair.size() != 2) refuse(fmt::format("{} has {} entries, not 2", what, pair.size()));
                a = json_string(pair[0], path_, what);
                b = json_string(pair[1], path_, what);
            }
            tok_.merges_.add(model_id(a, what), model_id(b, what), static_cast<int32_t>(rank), model_id(a + b, what));
        }
    }

    int32_t model_id(const std::string& token, const std::string& what) const {
        const auto it = tok_.token_ids_.find(token);
        if (it == tok_.token_ids_.end())
            refuse(fmt::format("{}: token '{}' is not in the vocab", what, printable(token)));
        return it->second;
    }

    void read_added_tokens() {
        std::vector<AddedToken> tokens;
        const Json* list = optional_field(json_, "added_tokens");
        for (const Json& t : list == nullptr ? Json::array() : json_array(*list, path_, "added_tokens")) {
            AddedToken a;
            a.content = json_string(json_at(t, "content", path_), path_, "added_tokens.content");
            a.id = token_id_value(json_at(t, "id", path_), fmt::format("added token '{}'", printable(a.content)));
            if (a.content.empty()) refuse(fmt::format("added token {} is empty", a.id));
            if (flag(t, "single_word", false))
                refuse(fmt::format("added token '{}': single_word = true is not implemented", printable(a.content)));
            a.lstrip = flag(t, "lstrip", false);
            a.rstrip = flag(t, "rstrip", false);
            a.normalized = flag(t, "normalized", !flag(t, "special", false));
            tok_.token_ids_[a.content] = a.id;
            set_id_bytes(a.content, a.id);
            tokens.push_back(std::move(a));
        }
        tok_.added_ = AddedTokenSplitter(tokens);
    }

    const std::string& path_;
    const Json& json_;
    BpeTokenizer tok_;
};

BpeTokenizer BpeTokenizer::load(const std::string& path) {
    std::error_code error;
    if (!std::filesystem::exists(path, error)) throw UsageError(fmt::format("tokenizer '{}': no such file", path));
    try {
        const std::string text = read_whole_file(path);
        return BpeTokenizerReader(path, read_json(text, path)).read();
    } catch (const RuntimeError& e) {  // the file system's and the JSON reader's errors, which name the file
        throw UsageError(fmt::format("tokenizer {}", e.what()));
    }
}

std::optional<int32_t> BpeTokenizer::token_id(std::string_view token) const {
    const auto it = token_ids_.find(std::string(token));
    if (it == token_ids_.end()) return std::nullopt;
    return it->second;
}

std::vector<int32_t> BpeTokenizer::merge_word(std::string_view word) const {
    std::vector<int32_t> symbols;
    symbols.reserve(word.size());
    int32_t pending_unk = -1;  // tokenizers' unk: held back so that fuse_unk can join the next one (-1: none)
    for (const char c : word) {
        const int32_t id = byte_ids_[static_cast<uint8_t>(c)];
        if (id >= 0) {
            if (pending_unk >= 0) symbols.push_back(pending_unk);
            pending_unk = -1;
            symbols.push_back(id);
        } else if (unk_id_) {
            if (pending_unk >= 0 && !fuse_unk_) symbols.push_back(pending_unk);
            pending_unk = *unk_id_;
        }  // else: no unk_token, the byte is dropped
    }
    if (pending_unk >= 0) symbols.push_back(pending_unk);
    return merges_.merge_word(symbols);
}

void BpeTokenizer::encode_word(const std::string& word, WordCache& cache, std::vector<int32_t>& ids) const {
    if (ignore_merges_) {
        if (const auto it = word_ids_.find(word); it != word_ids_.end()) {
            ids.push_back(it->second);
            return;
        }
    }
    auto it = cache.find(word);
    if (it == cache.end()) {
        if (cache.size() >= kWordCacheEntries) cache.clear();
        it = cache.emplace(word, merge_word(word)).first;
    }
    ids.insert(ids.end(), it->second.begin(), it->second.end());
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view utf8_text) const {
    const std::string text = replace_invalid_utf8(utf8_text);
    std::vector<int32_t> ids;
    WordCache cache;
    std::vector<std::string> words;
    for (const TextSegment& segment : added_.split(text)) {
        if (segment.id >= 0) {
            ids.push_back(segment.id);
            continue;
        }
        words.clear();
        pre_tokenizer_.split(segment.text, words);
        for (const std::string& word : words) encode_word(word, cache, ids);
    }
    return ids;
}

std::string BpeTokenizer::decode(std::span<const int32_t> ids) const {
    std::string out;
    for (const int32_t id : ids) {
        if (id < 0 || id >= vocab_size() || !id_bytes_[id])
            throw UsageError(fmt::format("token id {} is not in the tokenizer's vocabulary (0..{})", id,
                                         vocab_size() - 1));
        out += *id_bytes_[id];
    }
    return out;
}

}  // namespace nb

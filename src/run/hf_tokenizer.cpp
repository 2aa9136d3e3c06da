#include "src/run/hf_tokenizer.h"

#include "src/core/json_reader.h"

namespace nb {

namespace {

std::string dumped(const Json& j) { return j.dump(2) + "\n"; }

bool flag_of(const Json& object, const char* key) {
    const auto it = object.find(key);
    return it != object.end() && it->is_boolean() && it->get<bool>();
}

// The byte-level pre-tokenizer's add_prefix_space (itself, or within a Sequence), false where there is none.
bool adds_prefix_space(const Json& top) {
    const auto pre = top.find("pre_tokenizer");
    if (pre == top.end() || !pre->is_object()) return false;
    if (flag_of(*pre, "add_prefix_space")) return true;
    const auto parts = pre->find("pretokenizers");
    if (parts == pre->end() || !parts->is_array()) return false;
    for (const Json& part : *parts)
        if (part.is_object() && flag_of(part, "add_prefix_space")) return true;
    return false;
}

}  // namespace

std::vector<std::pair<std::string, std::string>> hf_tokenizer_files(const TokenizerFile& tokenizer,
                                                                    int64_t model_max_length) {
    std::string bytes = read_tokenizer_bytes(tokenizer);
    const Json top = read_json(bytes, tokenizer.path);  // read_tokenizer_file has read it: an object
    Json decoder = Json::object();
    if (const auto added = top.find("added_tokens"); added != top.end() && added->is_array())
        for (const Json& t : *added)
            decoder[std::to_string(t.at("id").get<int64_t>())] = {
                {"content", t.at("content")},         {"lstrip", flag_of(t, "lstrip")},
                {"normalized", flag_of(t, "normalized")}, {"rstrip", flag_of(t, "rstrip")},
                {"single_word", flag_of(t, "single_word")}, {"special", flag_of(t, "special")}};
    Json special = Json::object();
    if (tokenizer.eot_id)
        for (const char* role : {"bos_token", "eos_token", "unk_token"}) special[role] = kEndOfText;
    Json config = special;
    config["tokenizer_class"] = "PreTrainedTokenizerFast";
    config["model_max_length"] = model_max_length;
    config["clean_up_tokenization_spaces"] = false;
    config["add_prefix_space"] = adds_prefix_space(top);
    config["added_tokens_decoder"] = decoder;
    return {{kTokenizerFileName, std::move(bytes)},
            {"tokenizer_config.json", dumped(config)},
            {"special_tokens_map.json", dumped(special)}};
}

}  // namespace nb

#include "model/hf_config.h"

#include <stdexcept>

#include <fmt/format.h>
#include "src/core/error.h"
#include "src/core/json_reader.h"

namespace nb {

namespace {

// Json (nlohmann::json) keeps keys sorted, as transformers' to_json_string(sort_keys=True) writes them.
std::string dumped(const Json& j) { return j.dump(2) + "\n"; }

void add_token_ids(const HfModelConfig& c, Json& j) {
    if (c.bos_token_id) j["bos_token_id"] = *c.bos_token_id;
    if (c.eos_token_id) j["eos_token_id"] = *c.eos_token_id;
}

// One field of the config, read with its type checked: `fallback` where absent (or null) and a fallback is given.
template <class T>
T field(const Json& j, const char* key, const std::string& source, std::optional<T> fallback = std::nullopt) {
    const auto it = j.find(key);
    if (it == j.end() || it->is_null()) {
        if (fallback) return *fallback;
        throw RuntimeError(fmt::format("'{}': field '{}' is missing", source, key));
    }
    try {
        return it->get<T>();
    } catch (const Json::exception&) {
        throw RuntimeError(fmt::format("'{}': field '{}' is {}, not of the type a Llama config gives it", source, key,
                                       it->dump()));
    }
}

void refuse(const std::string& source, const std::string& what) {
    throw UsageError(fmt::format("'{}': {}: nobubble computes a plain Llama (LlamaForCausalLM) only", source, what));
}

// The features of a config that nobubble does not compute, each refused by its field's name.
void refuse_unsupported(const Json& j, const std::string& source) {
    const std::string type = field<std::string>(j, "model_type", source);
    if (type != "llama") refuse(source, fmt::format("model_type is '{}', not 'llama'", type));
    const std::string act = field<std::string>(j, "hidden_act", source, "silu");
    if (act != "silu") refuse(source, fmt::format("hidden_act is '{}', not 'silu'", act));
    for (const char* key : {"rope_scaling", "sliding_window"})
        if (j.contains(key) && !j[key].is_null()) refuse(source, fmt::format("{} is {}", key, j[key].dump()));
    for (const char* key : {"attention_bias", "mlp_bias"})
        if (field<bool>(j, key, source, false)) refuse(source, fmt::format("{} is true", key));
    if (field<double>(j, "attention_dropout", source, 0.0) != 0.0) refuse(source, "attention_dropout is not 0");
    if (field<int64_t>(j, "pretraining_tp", source, int64_t{1}) != 1) refuse(source, "pretraining_tp is not 1");
}

ModelConfig model_of(const Json& j, const std::string& source) {
    ModelConfig m;
    m.preset = "hf";
    m.vocab_size = field<int64_t>(j, "vocab_size", source);
    m.hidden_size = field<int64_t>(j, "hidden_size", source);
    m.ffn_hidden_size = field<int64_t>(j, "intermediate_size", source);
    m.num_layers = field<int64_t>(j, "num_hidden_layers", source);
    m.num_heads = field<int64_t>(j, "num_attention_heads", source);
    m.num_kv_heads = field<int64_t>(j, "num_key_value_heads", source, m.num_heads);  // LlamaConfig's default
    m.rope_theta = field<double>(j, "rope_theta", source, 10000.0);
    m.norm_eps = field<double>(j, "rms_norm_eps", source, 1e-6);              // LlamaConfig's default
    m.tie_embeddings = field<bool>(j, "tie_word_embeddings", source, false);  // LlamaConfig's default
    try {
        m.validate();
    } catch (const UsageError& e) {
        throw UsageError(fmt::format("'{}': {}", source, e.what()));
    }
    if (m.num_heads > 0 && j.contains("head_dim") && !j["head_dim"].is_null()) {
        const auto head_dim = field<int64_t>(j, "head_dim", source);
        if (head_dim != m.head_dim())
            refuse(source, fmt::format("head_dim is {}, not hidden_size / num_attention_heads = {}", head_dim,
                                       m.head_dim()));
    }
    return m;
}

}  // namespace

std::string hf_config_json(const HfModelConfig& c) {
    const ModelConfig& m = c.model;
    if (m.has_moe()) throw std::invalid_argument("an MoE model has no LlamaForCausalLM config");
    Json j = {
        {"architectures", {"LlamaForCausalLM"}},
        {"attention_bias", false},
        {"attention_dropout", 0.0},
        {"head_dim", m.head_dim()},
        {"hidden_act", "silu"},
        {"hidden_size", m.hidden_size},
        {"initializer_range", 0.02},
        {"intermediate_size", m.ffn_hidden_size},
        {"max_position_embeddings", c.max_position_embeddings},
        {"mlp_bias", false},
        {"model_type", "llama"},
        {"num_attention_heads", m.num_heads},
        {"num_hidden_layers", m.num_layers},
        {"num_key_value_heads", m.num_kv_heads},
        {"pretraining_tp", 1},
        {"rms_norm_eps", m.norm_eps},
        {"rope_scaling", nullptr},
        {"rope_theta", m.rope_theta},
        {"tie_word_embeddings", m.tie_embeddings},
        {"torch_dtype", c.torch_dtype},
        {"use_cache", true},
        {"vocab_size", m.vocab_size},
    };
    add_token_ids(c, j);
    return dumped(j);
}

std::string hf_generation_config_json(const HfModelConfig& c) {
    Json j = {{"_from_model_config", true}};
    add_token_ids(c, j);
    return dumped(j);
}

HfModelConfig parse_hf_config(const std::string& text, const std::string& source) {
    const Json j = read_json(text, source);  // untrusted: a key given twice is refused (src/core/json_reader.h)
    if (!j.is_object()) throw RuntimeError(fmt::format("'{}': not a JSON object", source));
    refuse_unsupported(j, source);
    HfModelConfig c;
    c.model = model_of(j, source);
    c.max_position_embeddings = field<int64_t>(j, "max_position_embeddings", source, int64_t{2048});
    c.torch_dtype = field<std::string>(j, "torch_dtype", source, std::string("float32"));
    if (j.contains("bos_token_id") && j["bos_token_id"].is_number_integer())
        c.bos_token_id = j["bos_token_id"].get<int64_t>();
    if (j.contains("eos_token_id") && j["eos_token_id"].is_number_integer())
        c.eos_token_id = j["eos_token_id"].get<int64_t>();
    return c;
}

}  // namespace nb

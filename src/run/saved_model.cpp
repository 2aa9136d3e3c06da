#include "src/run/saved_model.h"

#include <fmt/format.h>

#include <cstring>

#include "src/core/error.h"
#include "src/core/json_reader.h"
#include "src/run/checkpoint.h"

namespace nb {

namespace {

// An identity field, which the manifest keeps as text ("model.hidden_size": "576").
std::string identity_text(const Json& identity, const char* key, const std::string& source) {
    return json_string(json_at(identity, key, source), source, fmt::format("identity.{}", key));
}

// An identity field that must be a number: `parse` (std::stoll, std::stod) over all of its text.
template <class T, class Parse>
T identity_number(const Json& identity, const char* key, const std::string& source, Parse parse, const char* what) {
    const std::string text = identity_text(identity, key, source);
    size_t used = 0;
    try {
        const T value = parse(text, &used);
        if (used == text.size()) return value;
    } catch (const std::exception&) {
    }
    throw RuntimeError(fmt::format("'{}': field 'identity.{}' is '{}', not {}", source, key, text, what));
}

int64_t identity_int(const Json& identity, const char* key, const std::string& source) {
    return identity_number<int64_t>(identity, key, source,
                                    [](const std::string& t, size_t* used) { return std::stoll(t, used); },
                                    "an integer");
}

double identity_double(const Json& identity, const char* key, const std::string& source) {
    return identity_number<double>(identity, key, source,
                                   [](const std::string& t, size_t* used) { return std::stod(t, used); }, "a number");
}

ModelConfig model_of(const Json& identity, const std::string& source) {
    ModelConfig m;
    m.preset = "checkpoint";
    m.vocab_size = identity_int(identity, "model.vocab_size", source);
    m.hidden_size = identity_int(identity, "model.hidden_size", source);
    m.ffn_hidden_size = identity_int(identity, "model.ffn_hidden_size", source);
    m.num_layers = identity_int(identity, "model.num_layers", source);
    m.num_heads = identity_int(identity, "model.num_heads", source);
    m.num_kv_heads = identity_int(identity, "model.num_kv_heads", source);
    m.rope_theta = identity_double(identity, "model.rope_theta", source);
    m.norm_eps = identity_double(identity, "model.norm_eps", source);
    m.tie_embeddings = identity_text(identity, "model.tie_embeddings", source) == "true";
    const std::string moe = identity_text(identity, "model.moe", source);
    if (moe != "none")
        throw UsageError(fmt::format("'{}': the model has MoE blocks ({}); no transformers class computes nobubble's "
                                     "MoE layer exactly (routing, shared expert, aux-loss-free bias), so it is not "
                                     "exported", source, moe));
    m.validate();
    return m;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
    return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.data(), b.data(), a.bytes()) == 0;
}

// Stage `s`'s "weights.<param>" into `out`; a name already there (the tied matrix, on the first and last stage) must
// hold the same bits.
void add_stage_weights(const ResumePoint& resume, size_t s, NamedWeights& out) {
    const StageFiles files = read_stage_files(resume, resume.saved.cut[s]);
    const std::string prefix = "weights.";
    for (const auto& [name, tensor] : files.by_name) {
        if (!name.starts_with(prefix)) continue;
        const std::string param = name.substr(prefix.size());
        const auto [it, added] = out.emplace(param, *tensor);  // shares the decoded storage
        if (!added && !same_bytes(it->second, *tensor))
            throw RuntimeError(fmt::format("'{}': the two copies of the tied '{}' differ", files.source, param));
    }
}

// The manifest's "tokenizer" (an object where the run had one) and the copy beside it, which must be that file.
std::optional<TokenizerFile> saved_tokenizer(const Json& run, const std::string& step_dir, const std::string& source) {
    const auto it = run.find("tokenizer");
    if (it == run.end() || it->is_null()) return std::nullopt;
    const Json& saved = json_object(*it, source, "tokenizer");
    const std::string& sha256 = json_string(json_at(saved, "sha256", source), source, "tokenizer.sha256");
    const std::string path = step_dir + "/" + kTokenizerFileName;
    TokenizerFile copy;
    try {
        copy = read_tokenizer_file(path);
    } catch (const UsageError& e) {
        throw RuntimeError(fmt::format("'{}': field 'tokenizer' names a tokenizer, its copy is not there as it was "
                                       "saved: {}", source, e.what()));
    }
    if (copy.sha256 != sha256)
        throw RuntimeError(fmt::format("'{}': its sha256 differs from the manifest's field 'tokenizer.sha256' "
                                       "(damaged)", path));
    return copy;
}

}  // namespace

SavedModel read_saved_model(const std::string& load_path) {
    const SavedCheckpoint saved = read_saved_checkpoint(load_path);
    const std::string source = saved.resume.step_dir + "/manifest.json";
    const Json& identity = json_object(json_at(saved.run, "identity", source), source, "identity");
    SavedModel out;
    out.step_dir = saved.resume.step_dir;
    out.model = model_of(identity, source);
    out.seq_length = identity_int(identity, "seq_length", source);
    for (size_t s = 0; s < saved.resume.saved.cut.size(); ++s) add_stage_weights(saved.resume, s, out.weights);
    out.tokenizer = saved_tokenizer(saved.run, out.step_dir, source);
    return out;
}

}  // namespace nb

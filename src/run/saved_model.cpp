#include "src/run/saved_model.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstring>

#include "src/core/atomic_file.h"
#include "src/core/checkpoint_dir.h"
#include "src/core/error.h"
#include "src/run/checkpoint.h"

namespace nb {

namespace {

using Json = nlohmann::json;

const Json& member(const Json& j, const char* key, const std::string& source) {
    if (!j.is_object() || !j.contains(key)) throw RuntimeError(fmt::format("'{}': field '{}' is missing", source, key));
    return j[key];
}

int64_t integer(const Json& j, const char* key, const std::string& source) {
    const Json& v = member(j, key, source);
    if (!v.is_number_integer()) throw RuntimeError(fmt::format("'{}': field '{}' is not an integer", source, key));
    return v.get<int64_t>();
}

// An identity field, which the manifest keeps as text ("model.hidden_size": "576").
std::string identity_text(const Json& identity, const char* key, const std::string& source) {
    const Json& v = member(identity, key, source);
    if (!v.is_string()) throw RuntimeError(fmt::format("'{}': field 'identity.{}' is not a string", source, key));
    return v.get<std::string>();
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

// The run's stages and their step counts, as read_stage_files wants them.
SavedRun saved_run_of(const Json& manifest, const std::string& source) {
    const Json& run = member(manifest, "run", source);
    SavedRun saved;
    saved.step = integer(manifest, "step", source);
    for (const Json& s : member(run, "cut", source))
        saved.cut.push_back({integer(s, "first_block", source), integer(s, "end_block", source),
                             member(s, "embedding", source).get<bool>(), member(s, "head", source).get<bool>()});
    for (const Json& n : member(run, "steps_taken", source)) saved.steps_taken.push_back(n.get<int64_t>());
    if (saved.cut.empty() || saved.cut.size() != saved.steps_taken.size())
        throw RuntimeError(fmt::format("'{}': fields 'cut' and 'steps_taken' do not agree", source));
    return saved;
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

}  // namespace

SavedModel read_saved_model(const std::string& load_path) {
    SavedModel out;
    out.step_dir = find_checkpoint(load_path);
    const std::string source = out.step_dir + "/manifest.json";
    Json manifest;
    try {
        manifest = Json::parse(read_whole_file(source));
    } catch (const Json::exception& e) {
        throw RuntimeError(fmt::format("'{}': not JSON ({})", source, e.what()));
    }
    try {
        const Json& identity = member(member(manifest, "run", source), "identity", source);
        out.model = model_of(identity, source);
        out.seq_length = identity_int(identity, "seq_length", source);
        ResumePoint resume;
        resume.step_dir = out.step_dir;
        resume.format = integer(manifest, "format", source);  // which stage files it has (format 1 or 2)
        resume.saved = saved_run_of(manifest, source);
        for (size_t s = 0; s < resume.saved.cut.size(); ++s) add_stage_weights(resume, s, out.weights);
    } catch (const Json::exception& e) {
        throw RuntimeError(fmt::format("'{}': {}", source, e.what()));
    }
    return out;
}

}  // namespace nb

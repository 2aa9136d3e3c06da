#include "pipeline/stage/stage_checkpoint.h"

#include <climits>
#include <cstring>
#include <optional>
#include <set>
#include <string_view>

#include <fmt/format.h>

#include "src/core/error.h"
#include "src/core/json_reader.h"
#include "src/core/tensor_file.h"
#include "pipeline/stage/tied_gradient.h"

namespace nb {

namespace {

constexpr std::string_view kVersionPrefix = "version.";

std::string version_name(int64_t version, const std::string& param) {
    return fmt::format("{}{}.{}", kVersionPrefix, version, param);
}

// "version.<v>.<param>" -> v, when `name` is one and <param> is in `layout`.
std::optional<int64_t> version_of_name(const std::string& name, const ParamLayout& layout) {
    if (!name.starts_with(kVersionPrefix)) return std::nullopt;
    const size_t dot = name.find('.', kVersionPrefix.size());
    if (dot == std::string::npos || dot == kVersionPrefix.size()) return std::nullopt;
    int64_t v = 0;
    for (size_t i = kVersionPrefix.size(); i < dot; ++i) {
        if (name[i] < '0' || name[i] > '9' || v > (INT64_MAX - 9) / 10) return std::nullopt;
        v = v * 10 + (name[i] - '0');
    }
    if (layout.index_of(name.substr(dot + 1)) < 0) return std::nullopt;
    return v;
}

std::vector<std::pair<std::string, const Tensor*>> stage_file_tensors(
    std::vector<std::pair<std::string, const Tensor*>> named, const ParamLayout& layout, const OlderVersions& older) {
    for (const auto& [version, weights] : older)
        for (int i = 0; i < layout.size(); ++i) named.emplace_back(version_name(version, layout[i].name), &(*weights)[i]);
    return named;
}

}  // namespace

SafetensorsPieces stage_state_pieces(StageState& state, const OlderVersions& older) {
    std::vector<std::pair<std::string, const Tensor*>> carried;
    for (const auto& [name, tensor] : state.state_tensors()) carried.emplace_back(name, tensor);
    return stage_state_pieces(carried, state.model.layout(), older);
}

SafetensorsPieces stage_state_pieces(const std::vector<std::pair<std::string, const Tensor*>>& carried,
                                     const ParamLayout& layout, const OlderVersions& older) {
    // not moved: built in place (its pieces view its own header)
    return SafetensorsPieces(stage_file_tensors(carried, layout, older), kStageFileMetadata);
}

std::string encode_stage_state(StageState& state, const OlderVersions& older) {
    return stage_state_pieces(state, older).joined();
}

std::vector<NamedTensor> decode_stage_file(std::string_view bytes, const std::string& source, int64_t format) {
    if (format == 1) return decode_named_tensors(bytes, source);
    const SafetensorsView view = parse_safetensors(bytes, source);
    for (const auto& [key, want] : kStageFileMetadata) {  // the kind of file, then its version
        const auto it = view.metadata.find(key);
        const std::string has = it == view.metadata.end() ? "absent" : fmt::format("'{}'", printable(it->second));
        if (has != fmt::format("'{}'", want))
            throw RuntimeError(fmt::format("'{}': not a stage file this nobubble reads: its __metadata__ '{}' is {}, "
                                           "not '{}'", source, key, has, want));
    }
    return view.all_as_stored();
}

std::map<int64_t, TensorSet> saved_versions(const std::map<std::string, const Tensor*>& saved,
                                            const ParamLayout& layout, DType dtype, Device device,
                                            const std::string& source) {
    std::set<int64_t> versions;
    for (const auto& [name, tensor] : saved)
        if (const auto v = version_of_name(name, layout); v && !names_tied_matrix(name)) versions.insert(*v);
    std::map<int64_t, TensorSet> out;
    for (const int64_t v : versions) {
        TensorSet weights;
        for (int i = 0; i < layout.size(); ++i) {
            const std::string name = version_name(v, layout[i].name);
            const auto it = saved.find(name);
            if (it == saved.end())
                throw RuntimeError(fmt::format("'{}': weight version W{} has no tensor '{}'", source, v, name));
            const Tensor& t = *it->second;
            const DType want = layout[i].trainable() ? dtype : DType::f32;  // a buffer stays f32 (make_compute_weights)
            if (t.dtype() != want || t.shape() != layout[i].shape)
                throw RuntimeError(fmt::format("'{}': tensor '{}' is {} {}, this run's is {} {}", source, name,
                                               dtype_name(t.dtype()), shape_string(t.shape()), dtype_name(want),
                                               shape_string(layout[i].shape)));
            weights.tensors.push_back(t.clone().to(device));  // its own storage, not the decoded file's
        }
        out.emplace(v, std::move(weights));
    }
    return out;
}

void restore_stage_state(StageState& state, const std::map<std::string, const Tensor*>& saved, int64_t steps_taken,
                         const std::string& source) {
    const auto named = state.state_tensors();
    for (const auto& [name, tensor] : named) {  // every check before the first change
        const auto it = saved.find(name);
        if (it == saved.end()) throw RuntimeError(fmt::format("'{}': no tensor '{}' (written for another model or "
                                                              "optimizer?)", source, name));
        const Tensor from = state.own_rows(name, *it->second);  // the distributed optimizer's rows of it
        if (from.dtype() != tensor->dtype() || from.shape() != tensor->shape())
            throw RuntimeError(fmt::format("'{}': tensor '{}' is {} {}, this run's is {} {}", source, name,
                                           dtype_name(from.dtype()), shape_string(from.shape()),
                                           dtype_name(tensor->dtype()), shape_string(tensor->shape())));
    }
    if (steps_taken < 0) throw RuntimeError(fmt::format("'{}': step count {} is negative", source, steps_taken));
    for (const auto& [name, tensor] : named) tensor->copy_from(state.own_rows(name, *saved.at(name)));
    state.optimizer.restore_steps_taken(steps_taken);
}

namespace {

// Two files may hold one tensor only where both ends of a tied matrix hold one of its older versions, which are
// equal bit for bit (pipeline/stage/tied_gradient.h).
bool same_tied_version(const std::string& name, const Tensor& a, const Tensor& b) {
    return name.starts_with(kVersionPrefix) && names_tied_matrix(name) && a.dtype() == b.dtype() &&
           a.shape() == b.shape() && a.device() == Device::cpu && b.device() == Device::cpu &&
           std::memcmp(a.data(), b.data(), a.bytes()) == 0;
}

}  // namespace

std::map<std::string, const Tensor*> tensors_by_name(const std::vector<std::vector<NamedTensor>>& files,
                                                     const std::string& source) {
    std::map<std::string, const Tensor*> by_name;
    for (const auto& file : files)
        for (const NamedTensor& t : file)
            if (const auto [it, added] = by_name.emplace(t.name, &t.tensor);
                !added && !same_tied_version(t.name, *it->second, t.tensor))
                throw RuntimeError(fmt::format("'{}': tensor '{}' is in two stage files", source, t.name));
    return by_name;
}

}  // namespace nb

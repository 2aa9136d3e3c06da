#include "pipeline/stage_checkpoint.h"

#include <fmt/format.h>

#include "src/core/error.h"

namespace nb {

TensorFilePieces stage_state_pieces(StageState& state) {
    std::vector<std::pair<std::string, const Tensor*>> named;
    for (const auto& [name, tensor] : state.state_tensors()) named.emplace_back(name, tensor);
    return TensorFilePieces(named);  // not moved: built in place (its pieces view its own headers)
}

std::string encode_stage_state(StageState& state) { return stage_state_pieces(state).joined(); }

void restore_stage_state(StageState& state, const std::map<std::string, const Tensor*>& saved, int64_t steps_taken,
                         const std::string& source) {
    const auto named = state.state_tensors();
    for (const auto& [name, tensor] : named) {  // every check before the first change
        const auto it = saved.find(name);
        if (it == saved.end()) throw RuntimeError(fmt::format("'{}': no tensor '{}' (written for another model or "
                                                              "optimizer?)", source, name));
        const Tensor& from = *it->second;
        if (from.dtype() != tensor->dtype() || from.shape() != tensor->shape())
            throw RuntimeError(fmt::format("'{}': tensor '{}' is {} {}, this run's is {} {}", source, name,
                                           dtype_name(from.dtype()), shape_string(from.shape()),
                                           dtype_name(tensor->dtype()), shape_string(tensor->shape())));
    }
    if (steps_taken < 0) throw RuntimeError(fmt::format("'{}': step count {} is negative", source, steps_taken));
    for (const auto& [name, tensor] : named) tensor->copy_from(*saved.at(name));
    state.optimizer.restore_steps_taken(steps_taken);
}

std::map<std::string, const Tensor*> tensors_by_name(const std::vector<std::vector<NamedTensor>>& files,
                                                     const std::string& source) {
    std::map<std::string, const Tensor*> by_name;
    for (const auto& file : files)
        for (const NamedTensor& t : file)
            if (!by_name.emplace(t.name, &t.tensor).second)
                throw RuntimeError(fmt::format("'{}': tensor '{}' is in two stage files", source, t.name));
    return by_name;
}

}  // namespace nb

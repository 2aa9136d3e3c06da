// A stage's carried state to and from a checkpoint's stage file (docs/DESIGN.md section 8):
// StageState::state_tensors(), by canonical name, as a safetensors file (src/core/safetensors.h; __metadata__
// kStageFileMetadata), with the optimizer's step count beside it (the manifest holds it). Because the names are per
// parameter ("weights.<param>", "exp_avg.<param>", "ef_update.<param>", ...), a stage can be restored from the files
// of any stage cut, merged: that is what lets a gpipe/1f1b/2bw checkpoint load into another number of stages.
//
// Beside them go the older weight versions the stage still needs (2bw's previous version, PipeDream's stash),
// which the runner (pipeline/stage/weight_versions.h) and the oracle (pipeline/stage/weight_history.h) keep, each by its own
// rule: as "version.<v>.<parameter>", in the backend's compute dtype. Both write the same file for the same state.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "pipeline/stage/stage_state.h"
#include "src/core/checkpoint_dir.h"
#include "src/core/named_tensor.h"
#include "src/core/safetensors.h"

namespace nb {

// Older weight versions by version number (each over the stage's layout); the newest is the master itself.
using OlderVersions = std::map<int64_t, const TensorSet*>;

// The stage file: every carried tensor of `state`, in canonical order, then each older version in increasing
// order, its tensors in layout order (device tensors copied to the host); as pieces that view the tensors where
// they lie (written and hashed in place: no second copy of the state), or as one string.
SafetensorsPieces stage_state_pieces(StageState& state, const OlderVersions& older = {});
// The same file from the carried tensors given (the distributed optimizer's replica 0: its weights and every
// replica's optimizer state, in canonical order) and the older versions over `layout`.
SafetensorsPieces stage_state_pieces(const std::vector<std::pair<std::string, const Tensor*>>& carried,
                                     const ParamLayout& layout, const OlderVersions& older = {});
std::string encode_stage_state(StageState& state, const OlderVersions& older = {});

// A stage file's "__metadata__": what the NBSTATE1 header of format 1 said (the kind of file and its version).
inline const std::map<std::string, std::string> kStageFileMetadata = {{"format", "nobubble-stage-state"},
                                                                       {"version", "1"}};

// The tensors of a stage file of checkpoint format `format` (src/core/checkpoint_dir.h), in file order: safetensors
// with kStageFileMetadata (format 2) or NBSTATE1 (format 1, read only: src/core/tensor_file.h). nb::RuntimeError
// naming `source` for anything else or a damaged header.
std::vector<NamedTensor> decode_stage_file(std::string_view bytes, const std::string& source,
                                           int64_t format = kCheckpointFormat);

// The older versions `saved` holds for `layout`'s parameters, copied onto `device`. nb::RuntimeError naming
// `source` for a version that lacks one of them or whose tensor has another shape or a dtype other than `dtype`.
std::map<int64_t, TensorSet> saved_versions(const std::map<std::string, const Tensor*>& saved,
                                            const ParamLayout& layout, DType dtype, Device device,
                                            const std::string& source);

// Sets every carried tensor of `state` from `saved` (tensors by name, from one or more stage files) and the
// optimizer's step count. Checks first, changes after: nb::RuntimeError "'SOURCE': ..." naming the first tensor
// that is missing or whose dtype or shape differs, and then nothing in `state` has changed.
void restore_stage_state(StageState& state, const std::map<std::string, const Tensor*>& saved, int64_t steps_taken,
                         const std::string& source);

// `files`' tensors by name (they must outlive the map); nb::RuntimeError naming `source` for a name in two files.
std::map<std::string, const Tensor*> tensors_by_name(const std::vector<std::vector<NamedTensor>>& files,
                                                     const std::string& source);

}  // namespace nb

// A stage's carried state to and from a checkpoint's stage file (DESIGN section 8): StageState::state_tensors(),
// by canonical name, as a named-tensor file (src/core/tensor_file.h), with the optimizer's step count beside it
// (the manifest holds it). Because the names are per parameter ("weights.<param>", "exp_avg.<param>",
// "ef_update.<param>", ...), a stage can be restored from the files of any stage cut, merged: that is what lets
// a gpipe/1f1b/2bw checkpoint load into another number of stages.
//
// The weight versions a schedule still needs (2bw's previous version, PipeDream's stash) are the runner's and the
// oracle's to add beside these: they are not part of StageState.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "pipeline/stage_state.h"
#include "src/core/tensor_file.h"

namespace nb {

// The stage file: every carried tensor of `state`, in canonical order (device tensors copied to the host), as
// pieces that view the tensors where they lie (written and hashed in place: no second copy of the state), or as
// one string.
TensorFilePieces stage_state_pieces(StageState& state);
std::string encode_stage_state(StageState& state);

// Sets every carried tensor of `state` from `saved` (tensors by name, from one or more stage files) and the
// optimizer's step count. Checks first, changes after: nb::RuntimeError "'SOURCE': ..." naming the first tensor
// that is missing or whose dtype or shape differs, and then nothing in `state` has changed.
void restore_stage_state(StageState& state, const std::map<std::string, const Tensor*>& saved, int64_t steps_taken,
                         const std::string& source);

// `files`' tensors by name (they must outlive the map); nb::RuntimeError naming `source` for a name in two files.
std::map<std::string, const Tensor*> tensors_by_name(const std::vector<std::vector<NamedTensor>>& files,
                                                     const std::string& source);

}  // namespace nb

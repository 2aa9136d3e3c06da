// A checkpoint on disk (docs/DESIGN.md section 8): the directory DIR/step_<t>/ holds the files of step t (one per
// stage, each written by its own rank) and, written last, manifest.json: the format version, the step, each file's
// byte size and sha256, and the run's own fields (model, schedule, cut, optimizer, data position, ...). Every
// file goes through write_file_atomically, so a checkpoint exists exactly when its manifest does: a crash
// mid-save leaves an older complete one, never a damaged one.
//
// DIR also holds the run's lock file, DIR/.lock (src/core/save_dir_lock.h); listing and pruning look only at the
// step_<t> entries, so it is never taken for a checkpoint nor removed.
//
// Reading checks before it trusts: every file the manifest names must have its size and sha256, or the error
// names the file and the field that differs, and nothing has been changed by then.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "src/core/json.h"

namespace nb {

inline constexpr int64_t kCheckpointFormat = 1;

// What the manifest records of one file.
struct CheckpointEntry {
    std::string name;  // within the step directory, e.g. "stage_1.bin"
    int64_t bytes = 0;
    std::string sha256;
};

// "stage_<stage>.bin": the file of one stage in a step directory.
std::string stage_file_name(int stage);

// "DIR/step_<step>", created (with DIR) when missing.
std::string make_step_dir(const std::string& dir, int64_t step);
// Writes one file of a step directory atomically; what the manifest must say of it.
CheckpointEntry write_checkpoint_file(const std::string& step_dir, const std::string& name, const std::string& bytes);
// The same for a file given as pieces (a stage's tensors where they lie: src/core/tensor_file.h TensorFilePieces).
CheckpointEntry write_checkpoint_file(const std::string& step_dir, const std::string& name,
                                      const std::vector<std::string_view>& pieces);
// Completes the checkpoint: manifest.json with the entries and `run_json` (a JSON object, the run's own fields).
void write_manifest(const std::string& step_dir, int64_t step, const std::vector<CheckpointEntry>& entries,
                    const std::string& run_json);

// `path` itself when it is a step directory with a manifest; otherwise the newest step_<t> under it that has
// one. nb::RuntimeError naming `path` when there is none (a step directory without a manifest is incomplete).
std::string find_checkpoint(const std::string& path);

struct LoadedCheckpoint {
    std::string step_dir;
    int64_t step = 0;
    JsonValue run;                              // the run's own fields, as written
    std::map<std::string, std::string> files;  // name -> bytes, every one checked against the manifest
};
// Reads and checks a complete checkpoint (see the top of this file). With `only`, reads and checks just those
// files (a stage needs its own), and of the others checks that they are there with their size.
LoadedCheckpoint read_checkpoint(const std::string& step_dir, const std::set<std::string>* only = nullptr);

// --save-keep K: removes every step directory under `dir` older than its K newest complete checkpoints (K >= 1),
// so an older one goes only once a newer one is complete.
void prune_checkpoints(const std::string& dir, int keep);

}  // namespace nb

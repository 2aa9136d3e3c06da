// A checkpoint on disk (docs/DESIGN.md section 8): the directory DIR/step_<t>/ holds the files of step t (one per
// stage, each written by its own rank) and, written last, manifest.json: the format version, the step, each file's
// byte size and sha256, and the run's own fields (model, schedule, cut, optimizer, data position, ...). A checkpoint
// exists exactly when its manifest does.
//
// A save never writes into a complete checkpoint's folder. Every file of step t is written (each through
// write_file_atomically) into a staging sibling, DIR/step_<t>.saving/, the manifest last; then the switch: a complete
// DIR/step_<t> of an earlier save (a resumed or resharded run saving that step again) is renamed aside to
// DIR/step_<t>.replaced, the staging folder renamed to DIR/step_<t>, DIR fsynced, and the replaced one removed.
// Each rename is atomic, so at every instant of a save DIR holds a complete checkpoint of every step it held
// before (step_<t> itself, or, between the two renames, step_<t>.saving with its manifest, which find_checkpoint
// takes for step t) and, once the manifest is written, of the new one. A save killed before its manifest leaves
// an incomplete staging folder, which is no checkpoint.
//
// The next run that saves into DIR (remove_stale_saves, under DIR's lock) removes what killed saves left: staging
// folders without a manifest, replaced folders, step folders without a manifest (a killed prune's), stray
// "*.tmp.<pid>" files; a complete staging folder takes its step's name, unless a complete step_<t> is there (then
// it goes) or it is the checkpoint this run resumes from (then it stays as it is while other ranks may be reading
// it, and takes its name at the run's first save: settle_complete_staging).
//
// DIR also holds the run's lock file, DIR/.lock (src/core/save_dir_lock.h); listing and pruning look only at the
// step_<t> entries, so it is never taken for a checkpoint nor removed.
//
// Reading checks before it trusts: every file the manifest names must have its size and sha256, or the error
// names the file and the field that differs, and nothing has been changed by then.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "src/core/json_reader.h"

namespace nb {

// The manifest's "format": 2 since the stage files are safetensors (stage_<s>.safetensors); format 1's stage files
// were NBSTATE1 (stage_<s>.bin, src/core/tensor_file.h), still read.
inline constexpr int64_t kCheckpointFormat = 2;
inline constexpr int64_t kOldestCheckpointFormat = 1;

// What the manifest records of one file.
struct CheckpointEntry {
    std::string name;  // within the step directory, e.g. "stage_1.safetensors"
    int64_t bytes = 0;
    std::string sha256;
};

// The file of one stage in a step directory of checkpoint format `format`: "stage_<stage>.safetensors" (format 2),
// "stage_<stage>.bin" (format 1).
std::string stage_file_name(int stage, int64_t format = kCheckpointFormat);

// "DIR/step_<step>.saving", created (with DIR) when missing: where a save of `step` writes its files (see the top).
std::string make_staging_dir(const std::string& dir, int64_t step);
// Writes one file of a step directory atomically; what the manifest must say of it.
CheckpointEntry write_checkpoint_file(const std::string& step_dir, const std::string& name, const std::string& bytes);
// The same for a file given as pieces (a stage's tensors where they lie: src/core/safetensors.h SafetensorsPieces).
CheckpointEntry write_checkpoint_file(const std::string& step_dir, const std::string& name,
                                      const std::vector<std::string_view>& pieces);
// Test-only (the fault matrix's kill points inside a save, src/run/checkpoint.h): called as the manifest is about
// to be written (with its path), between the switch's two renames and halfway through a prune (with the step
// directory concerned). Nothing is called where none is given.
enum class SaveStep { manifest, switch_names, prune };
using SaveStepHook = std::function<void(SaveStep step, const std::string& path)>;

// Completes the checkpoint: manifest.json with the entries and `run_json` (a JSON object, the run's own fields) in
// `staging_dir` (make_staging_dir's), then the switch to DIR/step_<step> (see the top). Returns DIR/step_<step>.
std::string write_manifest(const std::string& staging_dir, int64_t step, const std::vector<CheckpointEntry>& entries,
                           const std::string& run_json, const SaveStepHook& at = {});

// `path` itself when it is a step directory with a manifest (or, where a save was killed between its two renames,
// its complete staging sibling); otherwise the newest complete checkpoint under it, step_<t> before a complete
// step_<t>.saving of the same step. nb::RuntimeError naming `path` when there is none (a step directory without a
// manifest is incomplete).
std::string find_checkpoint(const std::string& path);

struct LoadedCheckpoint {
    std::string step_dir;
    int64_t step = 0;
    int64_t format = kCheckpointFormat;        // the manifest's: which stage files it has (stage_file_name)
    Json run;                                  // the run's own fields, as written
    std::map<std::string, std::string> files;  // name -> bytes, every one checked against the manifest
};
// Reads and checks a complete checkpoint (see the top of this file). With `only`, reads and checks just those
// files (a stage needs its own), and of the others checks that they are there with their size.
LoadedCheckpoint read_checkpoint(const std::string& step_dir, const std::set<std::string>* only = nullptr);

// --save-keep K: removes every step directory under `dir` (staging ones too) older than its K newest complete
// checkpoints (K >= 1), so an older one goes only once a newer one is complete.
void prune_checkpoints(const std::string& dir, int keep, const SaveStepHook& at = {});

// Every complete staging folder in `dir` (a switch killed between its renames) takes its step's name, or goes where
// a complete step_<t> is there; incomplete ones (saves being written) are left alone. For the holder of DIR's lock
// once no rank reads the checkpoint it resumed from (after its first save).
void settle_complete_staging(const std::string& dir);

// What killed saves left in `dir` (see the top), removed or completed; `resuming_from`, the step directory this
// run resumes from (empty: none), is left as it is. Only for the holder of DIR's lock, before its first save.
void remove_stale_saves(const std::string& dir, const std::string& resuming_from);

}  // namespace nb

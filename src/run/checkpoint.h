// Saving and resuming a run (docs/DESIGN.md section 8), on the files of src/core/checkpoint_dir.h, for every loop: the
// single-process loop (src/run/trainer.cpp), the pipeline executor (each stage writes its own file,
// pipeline/stage/stage_runner.h; stage 0's collector completes the manifest, src/run/progress_collector.h) and the
// oracle (src/run/reference.cpp). All three write the same files for the same state, so a checkpoint of one
// loads into another.
//
// The manifest's "run" object:
//   program         the version of nobubble that wrote it
//   identity        what must be the same for a resume to continue the saved run exactly: the model's shape, the
//                   update rule and every optimizer hyperparameter (defaults filled in), the LR schedule as it
//                   runs (so --train-iters matters where it sets the decay), the schedule, the batch shape and the
//                   seed. A checkpoint whose identity differs is refused with the field that differs and both
//                   values; nothing else (--train-iters, logging, evaluation, --save) needs to match.
//   stages, cut     the stages that wrote it and what each held. Another stage count is a reshard: each new stage
//                   reads the files of the saved stages that held its parameters (state is keyed by parameter
//                   name). gpipe, 1f1b and 2bw reshard; pipedream, whose stash depth depends on the stage, does
//                   not.
//   steps_taken     each stage's optimizer step count
//   data            the training loader's position (epoch, index) at the step
//   rng             the only randomness of training after the initialisation: the data order, drawn from the
//                   seed per epoch (src/data/batch_loader.h), so the seed and the epoch are its whole state
//   data_files      per flag (--data, --val-data) its files in order: path, bytes, fingerprint
//                   (src/data/data_fingerprint.h). A resume takes the same files under any path and refuses a
//                   changed one naming it, unless --allow-data-change (then the log says how it differs). A
//                   checkpoint written before them has the paths as spelt in its identity, which must match.
//   tokenizer       the run's tokenizer (src/data/tokenizer_file.h): {"sha256", "vocab_size"}, or null for none; the
//                   step directory then holds its copy, tokenizer.json (listed with the files, written with the
//                   manifest, before it). A resume compares it as it compares the data (another tokenizer, or one
//                   where the checkpoint had none, or none where it had one, is refused naming both, unless
//                   --allow-data-change); a checkpoint written before the field is checked against nothing.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "model/stage_model.h"
#include "pipeline/stage/stage_state.h"
#include "src/core/checkpoint_dir.h"
#include "src/core/save_dir_lock.h"
#include "src/core/named_tensor.h"
#include "src/data/batch_loader.h"
#include "src/plan/run_plan.h"

namespace nb {

// What a checkpoint of `step` (iterations done) says of the run besides its files.
struct SavedRun {
    int64_t step = 0;
    std::vector<StageSpec> cut;        // the stages that wrote it
    std::vector<int64_t> steps_taken;  // per stage
    LoaderPosition data;
    double elapsed_s = 0;  // the run's seconds at the checkpoint (IterationReport::elapsed_s); 0 in older ones
};

// --save DIR before the first step (src/core/save_dir_lock.h): DIR created, locked for this run, room there for the
// checkpoints of `checkpoint_bytes()` bytes (pipeline/stage/stage_memory.h estimate_checkpoint_bytes; estimated only
// with --save) and the tokenizer's copy that it holds at its peak (--save-keep K: K + 1), and what killed saves left removed
// (src/core/checkpoint_dir.h remove_stale_saves); nb::UsageError naming DIR otherwise. The data files are
// fingerprinted here, as the run begins. Nothing without --save. One process of a run holds it, until
// the run ends: the plain loop, the in-process pipeline and the oracle their own; under mpirun rank 0 for the job
// (src/run/mpi_driver.cpp).
std::optional<SaveDirLock> claim_save_dir(const TrainOptions& options,
                                          const std::function<int64_t()>& checkpoint_bytes);

// Completes the checkpoint staged in `staging_dir` (make_staging_dir's; the stage files are written): its manifest
// and the switch to DIR/step_<t>, then --save-keep's pruning, then one line to `log` naming the directory.
void complete_checkpoint(const TrainOptions& options, const std::string& staging_dir,
                         const std::vector<CheckpointEntry>& entries, const SavedRun& saved, std::FILE* log);

// --load: the checkpoint --load names, its manifest checked against this run (its identity; its stage count and
// its cut, `cut`, where the schedule cannot reshard: pipedream) and every file's size. nb::RuntimeError naming the
// file and the field.
struct ResumePoint {
    std::string step_dir;
    int64_t format = kCheckpointFormat;  // the manifest's (src/core/checkpoint_dir.h): which stage files it has
    SavedRun saved;
    std::vector<std::string> notes;  // lines for the log: with --allow-data-change, how the data differs
};
ResumePoint read_resume_point(const TrainOptions& options, const std::vector<StageSpec>& cut);

// A checkpoint read for what it holds, checked against no run (`export`, `eval --load`, --pretrained-checkpoint):
// `path` as --load takes it, its manifest and every file's size checked; the ResumePoint read_stage_files takes,
// and the manifest's run fields as written (their "identity": the model's shape).
struct SavedCheckpoint {
    ResumePoint resume;
    Json run;
};
SavedCheckpoint read_saved_checkpoint(const std::string& path);

// The saved tensors one stage of this run needs: the files of the saved stages that held any of `stage`'s
// parameters, each read and checked (size, sha256), decoded, and their tensors by name; and that stage's step
// count. The map points into `files`.
struct StageFiles {
    std::vector<std::vector<NamedTensor>> files;
    std::map<std::string, const Tensor*> by_name;
    int64_t steps_taken = 0;
    std::string source;  // the files, for errors
};
// `tied`: the model's embeddings are tied; a head without the embedding then also reads the file that holds the
// matrix (its copy is not written: pipeline/stage/tied_gradient.h).
StageFiles read_stage_files(const ResumePoint& resume, const StageSpec& stage, bool tied = false);

// The one-stage loops (the plain loop; `bench checkpoint`): `stage`'s checkpoint of `step`, its file then its
// manifest; and its resume from --load, checked first, returning what the manifest says.
void save_one_stage(const TrainOptions& options, int64_t step, double elapsed_s, StageState& stage,
                    const LoaderPosition& data, std::FILE* log);
ResumePoint load_one_stage(const TrainOptions& options, StageState& stage, std::FILE* log);

// "resumed from DIR (after step T)" and, for a reshard, from how many stages.
void print_resumed(const ResumePoint& resume, int stages, std::FILE* log);

// "stopped by SIGTERM after step T; checkpoint saved" (exit code 0 follows: saved and stopped).
void print_stopped_by_signal(std::FILE* log, int signal, int64_t step);

}  // namespace nb

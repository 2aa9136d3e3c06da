// A stage's memory, estimated before any of it is allocated: what `train` checks against the memory available so
// that a model which cannot fit is refused with one line instead of being killed by the kernel later, and what
// `nobubble info` prints.
//
// Counted per stage (all stages in one process: their sum), with N the stage's parameter count:
//   weights          the f32 master weights, plus the compute copy where the backend computes in another dtype
//                    (CUDA: bf16): 4 N (+ 2 N) bytes
//   weight versions  the older versions the schedule holds beside the newest, as snapshots of the compute copy
//                    (pipeline/schedule/schedule.h max_versions_held: gpipe/1f1b none, 2bw one, pipedream p - s - 1)
//   gradients        f32: 4 N bytes (a stage holding both ends of a tied matrix: and the head's half, 4 V d)
//   optimizer state  what the optimizer and the delay fix allocate (each one's state_bytes in optim/: AdamW 8 N,
//                    Lion 4 N, Adan 16 N, ef another 4 N, ...)
//   activations      the most the stashes of the microbatches in flight hold at once, under the run's
//                    --recompute-granularity: the stage's action list walked with one microbatch's stash as
//                    model/stash_bytes.h plans it (kept until its backward, a recomputed group's rerun while that
//                    runs, what W reads between B and W; the plain loop: one microbatch). Exact in f32 (the
//                    progress line's act MiB measures the same); scaled to the activation dtype on other
//                    backends, which counts their f32 statistics at that dtype too: under 1% of a stash
// Not counted: the working buffers of the one forward or backward running (activation gradients, the logits'
// gradient), messages in transit, the backend's own workspaces. The estimate is a floor: a run it refuses cannot
// fit; one it lets through may still run out, and then the allocator's own error says so.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "model/params.h"
#include "model/stage_model.h"
#include "pipeline/schedule/pipeline_setup.h"
#include "src/ops/ops.h"
#include "src/plan/train_options.h"

namespace nb {

struct StageMemory {
    int64_t weights_bytes = 0;
    int64_t versions_bytes = 0;
    int64_t gradients_bytes = 0;
    int64_t optimizer_bytes = 0;
    int64_t activations_bytes = 0;

    int64_t total_bytes() const {
        return weights_bytes + versions_bytes + gradients_bytes + optimizer_bytes + activations_bytes;
    }
    StageMemory& operator+=(const StageMemory& other);
};

// What a schedule keeps on a stage at once: weight versions (the newest included) and microbatches in flight.
struct StageLoad {
    int64_t versions_held = 1;
    int64_t microbatches_in_flight = 1;
    // The part's actions (representative_part_plans, pipeline/schedule/schedule.h), walked for the activation
    // peak (peak_stash_bytes); empty: microbatches_in_flight stashes kept, one of them in its backward.
    StagePlan actions = {};
};

// Stage `spec` (parameters `layout`) of a run of `options` (validated), on a backend computing in
// `activation_dtype`.
StageMemory estimate_stage_memory(const TrainOptions& options, const StageSpec& spec, const ParamLayout& layout,
                                  const StageLoad& load, DType activation_dtype);
// Stage `stage` of a pipeline run, its load read off its plan.
StageMemory estimate_stage_memory(const PipelineSetup& setup, int stage, DType activation_dtype);
// What rank `rank` of a pipeline run holds: its parts' (one, or with chunks per rank its V) added up.
StageMemory estimate_rank_memory(const PipelineSetup& setup, int rank, DType activation_dtype);
// The stages of `cut` together, each holding one weight version and one microbatch's stash: the plain loop (one
// stage, the whole model); for the oracle, which keeps versions by its own rule, a floor.
StageMemory estimate_cut_memory(const TrainOptions& options, const std::vector<StageSpec>& cut,
                                DType activation_dtype);

// What one checkpoint of the run writes (pipeline/stage/stage_checkpoint.h), from the same counts: each stage's f32 master
// weights (not the compute copy), the older weight versions it holds and its optimizer state; the files' names and
// shapes come on top (a few dozen bytes a tensor). Every stage of a pipeline run, or the stages of `cut` each
// holding one version (the plain loop; for the oracle, a floor). What --save checks the disk's free space against.
int64_t estimate_checkpoint_bytes(const PipelineSetup& setup, DType activation_dtype);
int64_t estimate_checkpoint_bytes(const TrainOptions& options, const std::vector<StageSpec>& cut,
                                  DType activation_dtype);

// "1.26 TB (weights 315 GB, weight versions 0 B, gradients 315 GB, optimizer state 630 GB, activations 52.4 MB)"
std::string describe_stage_memory(const StageMemory& memory);

// Refuses a run whose stages first_stage .. first_stage + num_stages - 1 (those of this process) cannot fit:
// nb::UsageError (the config cannot run here) "stage 0 needs 1.26 TB (weights ...) but 22.8 GB of host memory
// is available (MemAvailable)". Nothing happens when the memory available is not known.
void require_memory_fits(int first_stage, int num_stages, const StageMemory& need,
                         const std::optional<AvailableMemory>& available);

}  // namespace nb

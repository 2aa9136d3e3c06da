// RunShape: the counts that size a run (its batch and its pipeline), as every command that takes them holds them.
// Their flags are declared once (src/cli/run_shape_flags.cpp) and their ranges are written once, here:
// make_run_plan checks them first, and the commands that plan without training (`info`, `schedule`, `bench`)
// check them before they use a count. The model's shape is ModelConfig::validate's, the cut's choose_pipeline_cut's.
#pragma once

#include <cstdint>

namespace nb {

struct RunShape {
    int64_t micro_batch_size = 8;  // --micro-batch-size B: sequences per microbatch
    int64_t num_microbatches = 1;  // --num-microbatches m: microbatches per replica and iteration
    int64_t seq_length = 256;      // --seq-length T: tokens per sequence
    int stages = 1;                // --stages P
    int data_parallel_size = 1;    // --data-parallel-size D: replicas of the pipeline
    int virtual_stages = 1;        // --virtual-stages V: model chunks per stage
};

// value >= 1, or nb::UsageError "FLAG must be positive, got N".
void require_positive_flag(int64_t value, const char* flag);

// Every count >= 1, or nb::UsageError "--FLAG must be positive, got N" for the first that is not, in the order of
// the fields. A count a command does not take keeps its default, which passes.
void check_run_shape(const RunShape& shape);

// The shape of a job of `world` MPI ranks. Without --stages (`stages_given` false) and with world > 1, the ranks
// are D pipelines of world / D stages (rank = replica x P + stage, src/plan/rank_layout.h), and a world that D
// does not divide is a usage error naming both; given stages stay, for the pipeline's rank check
// (check_stages_match_ranks). The shape is checked first, so that a bad D is its usage error on every rank, never a
// division by zero.
RunShape shape_for_world(RunShape shape, bool stages_given, int world);

}  // namespace nb

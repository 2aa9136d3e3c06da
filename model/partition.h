// Cutting the model into pipeline stages: contiguous slices of [Embedding, Block 0..N-1, OutputHead], stage 0
// holding the embedding, the last stage the final norm, LM head and loss, every stage at least one block.
//
//   --pipeline-cut cost     (the default) the slowest stage's forward + backward time as small as it can be, the
//                           time estimated by the FLOP model of model/flops.h (stage_flops_per_token: 3 x forward,
//                           attention's T x T square included as it counts it), not by a measured profile; within
//                           each stage's memory when a bound is given (StageFits)
//   --pipeline-cut params   the largest stage's parameter count as small as it can be (the cut before `cost`)
//   --pipeline-layout a,b,c the blocks of each stage as given (Megatron's pipeline layout), overriding the two
//
// src/plan/pipeline_cut.h turns a run's options into one of these: the one place that chooses a run's cut.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "model/config.h"
#include "model/stage_model.h"
#include "src/core/name_table.h"

namespace nb {

// --pipeline-cut: what the stage cut balances.
enum class PipelineCut {
    cost,    // the slowest stage's forward + backward FLOPs, within memory
    params,  // the largest stage's parameters
};
inline constexpr auto kPipelineCuts = name_table<PipelineCut>("--pipeline-cut", {
    {"cost", PipelineCut::cost, "balance forward + backward FLOPs, within each stage's memory"},
    {"params", PipelineCut::params, "balance parameter counts"},
});
// kPipelineCuts.parse and .name.
PipelineCut parse_pipeline_cut(std::string_view name);
std::string_view pipeline_cut_name(PipelineCut cut);

// What decided a stage's blocks: the FLOP balance, its memory (its range in the cost-optimal cut would not fit),
// the parameter balance, or --pipeline-layout.
enum class StageBound { cost, memory, params, layout };
std::string_view stage_bound_name(StageBound bound);  // "cost", "memory", "params", "layout"

struct StageCut {
    std::vector<StageSpec> stages;
    std::vector<StageBound> bounds;  // per stage
    // The cost cut only: false when no cut fits every stage's memory. `stages` is then the cost-optimal cut with
    // memory ignored, which the memory check (pipeline/stage/stage_memory.h) refuses with its own line.
    bool fits_memory = true;
};

// Whether stage `stage` of the cut may hold blocks [first_block, end_block), with the embedding when it is stage 0
// and the head when it is the last. It must hold for every sub-range of a range it holds for (a stage's memory
// only grows with its blocks). Empty: every range fits.
using StageFits = std::function<bool(int stage, int64_t first_block, int64_t end_block)>;

// --pipeline-cut params: minimises the largest stage's parameter count. Among equally balanced cuts, earlier
// stages get fewer blocks: under 1F1B they hold more microbatches in flight. UsageError when there are more
// stages than blocks; num_stages >= 1 (the plan checks --stages).
std::vector<StageSpec> partition_model(const ModelConfig& config, int num_stages);

// --pipeline-cut cost: minimises the slowest stage's forward + backward FLOPs per token at `seq_len` (the FLOP
// model, not a measured profile; the embedding computes none), over the cuts whose every stage `fits`; among
// equally good cuts, earlier stages get fewer blocks. A stage is bound by memory where its range in the cut
// that ignores memory would not fit it. No cut that fits: the memory-blind cut, fits_memory false. One stage:
// the whole model, `fits` not asked. UsageError when there are more stages than blocks.
// O(P L) questions per candidate time, log2(the model's FLOPs) candidates (a binary search over the slowest
// stage's time; the block costs are whole numbers).
StageCut partition_model_by_cost(const ModelConfig& config, int num_stages, int64_t seq_len,
                                 const StageFits& fits = {});

// --pipeline-layout's text, "3,4,4,2": blocks per stage. UsageError naming the flag for an entry that is not a
// positive integer, or 0 ("stage 2 would be empty").
std::vector<int64_t> parse_pipeline_layout(std::string_view text);
// The cut `blocks_per_stage` names. UsageError when its count is not num_stages or its sum not the model's
// layers (both numbers said).
std::vector<StageSpec> partition_model_by_layout(const ModelConfig& config, int num_stages,
                                                 const std::vector<int64_t>& blocks_per_stage);
// "3,4,4,2": the --pipeline-layout that gives `cut`.
std::string pipeline_layout_of(const std::vector<StageSpec>& cut);

// What each stage holds, for log lines: "blocks 0-1 | 2-3 | 4".
std::string describe_cut(const std::vector<StageSpec>& cut);

}  // namespace nb

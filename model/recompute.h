// Activation recomputation (Megatron's --recompute-granularity, --recompute-method, --recompute-num-layers):
// which of a stage's blocks keep only their input in the forward and rerun their forward inside the backward.
//
//   full, uniform, N   every block recomputed: a part's blocks cut into groups of N ([0, N), [N, 2N), ... of the
//                      part's blocks, the last group shorter), each group keeping only its first block's input and
//                      rerun as a unit when the backward reaches its last block
//   full, block, N     the first N blocks of each part recomputed, one at a time; the others keep their stash
//   full, either       and the output head keeps its input, 1/rms and log-sum-exp but not its logits (N x V,
//                      the largest tensor of a stage with the head), rerunning its norm and the logits' GEMM
//   selective          every block keeps its GEMM outputs (q, k, v, the attention's output and log-sum-exp, the
//                      MLP's gate and up, the residuals and the norms' 1/rms) but not what one cheap op makes
//                      again from them: the two norms' outputs (rmsnorm of x and x1) and the SwiGLU activation,
//                      3 of a dense block's 6 d + 2 kv + 3 f floats per row that are d or f wide; the backward
//                      reruns those ops. (The CPU attention keeps no T x T probabilities, only the log-sum-exp:
//                      there is none to drop.)
//
// A part is what one stage_forward call runs (a stage, or under interleaved 1F1B and zb-v one chunk of it), as
// Megatron counts per virtual pipeline stage. The embedding and the output head always keep theirs.
//
// The bits are those of a run that keeps everything (docs/DESIGN.md section 2, "Recomputation"): the forward is
// rerun on the weights the backward is given, which the schedules make the forward's own version (the stashed
// version of 2bw and pipedream, the predicted weights of predict and lookahead: pipeline/schedule/schedule.h), with
// the same ops in the same order; the rerun tells no MoeObserver (the expert loads and the aux loss are counted by
// the forward only), and under a split backward W reads what B's rerun made.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "model/stage_model.h"
#include "src/core/name_table.h"

namespace nb {

// --recompute-granularity: what a block keeps between its forward and its backward.
enum class RecomputeGranularity {
    none,  // everything its backward reads
    full,       // the block's (or its group's) input only
    selective,  // the GEMM outputs, not the norm outputs nor the SwiGLU activation
};
inline constexpr auto kRecomputeGranularities = name_table<RecomputeGranularity>("--recompute-granularity", {
    {"none", RecomputeGranularity::none, "keep every activation"},
    {"full", RecomputeGranularity::full, "keep a block group's input, rerun its forward in the backward"},
    {"selective", RecomputeGranularity::selective, "keep the GEMM outputs, recompute the norms and SwiGLU"},
});
RecomputeGranularity parse_recompute_granularity(std::string_view name);  // kRecomputeGranularities.parse
std::string_view recompute_granularity_name(RecomputeGranularity granularity);

// --recompute-method: which blocks full recomputation takes (above).
enum class RecomputeMethod {
    uniform,  // all, in groups of --recompute-num-layers
    block,    // the first --recompute-num-layers of each part, one by one
};
inline constexpr auto kRecomputeMethods = name_table<RecomputeMethod>("--recompute-method", {
    {"uniform", RecomputeMethod::uniform, "every block, in groups of --recompute-num-layers"},
    {"block", RecomputeMethod::block, "the first --recompute-num-layers blocks of each stage part"},
});
RecomputeMethod parse_recompute_method(std::string_view name);  // kRecomputeMethods.parse
std::string_view recompute_method_name(RecomputeMethod method);

struct RecomputeConfig {
    RecomputeGranularity granularity = RecomputeGranularity::none;
    RecomputeMethod method = RecomputeMethod::uniform;
    int64_t num_layers = 1;  // --recompute-num-layers (>= 1)
    bool full() const { return granularity == RecomputeGranularity::full; }
};

// By layer of a stage `spec` ([embedding,] its blocks[, head]): -1 where the layer keeps its stash, else the index
// of the first layer of its recompute group (the layer that keeps the group's input).
std::vector<int64_t> recompute_groups(const StageSpec& spec, const RecomputeConfig& config);

}  // namespace nb

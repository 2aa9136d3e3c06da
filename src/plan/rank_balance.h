// Balancing a cut by rank, for schedules with several chunks per rank (interleaved 1F1B, zb-v).
//
// The cost cut (model/partition.h) makes the slowest *part* as fast as it can be. With V chunks a rank runs V parts
// one after another, so the pipeline's pace is set by the slowest *rank*: the sum of its parts' forward + backward
// FLOPs. The two differ most where one part is heavy: zb-v's V puts the first part (the embedding) and the last
// (the final norm, the LM head and the loss: for a 49k vocabulary about seven blocks) on rank 0, and a cut even per
// part leaves rank 0 with about 1.4 x the others' work. balance_ranks looks for the cut that makes (the slowest
// rank's FLOPs, then the sum of squares of the parts' FLOPs) least, compared in that order, each part keeping a
// block and fitting its memory. The second evens the parts out among the cuts as good by rank: a chunk's forward is
// one step of the schedule's flow, and a part far heavier than its neighbours stalls them. The search: from the
// per-part cut, steepest descent by moving one boundary one block; then branch and bound over every cut from that
// score (a partial cut whose slowest rank and sum of squares already reach the best's is dropped), which finds the
// best cut, the first in boundary order among equals, unless it visits more than `max_nodes` partial cuts (then
// the best found so far: at least the descent's). tests/unit/test_pipeline_cut.cpp checks it against every cut of
// small models.
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.h"
#include "model/partition.h"
#include "src/plan/stage_placement.h"

namespace nb {

// `cut` has one part per placement.parts(), in forward order; the result too. `fits` empty: no memory bound.
inline constexpr int64_t kBalanceSearchNodes = 20'000'000;  // about a second on one core
std::vector<StageSpec> balance_ranks(const ModelConfig& config, int64_t seq_len, const StagePlacement& placement,
                                     const std::vector<StageSpec>& cut, const StageFits& fits,
                                     int64_t max_nodes = kBalanceSearchNodes);

// Per rank, the sum of its parts' forward + backward FLOPs per token (the FLOP model's).
std::vector<double> rank_flops(const ModelConfig& config, int64_t seq_len, const StagePlacement& placement,
                               const std::vector<StageSpec>& cut);

}  // namespace nb

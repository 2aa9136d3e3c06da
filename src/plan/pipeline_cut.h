// The stage cut of a run, from its options: the one function that chooses it, so that `train` (its plan),
// `reference` (the oracle, which must cut as train does), `bench schedules` and `nobubble info` agree.
#pragma once

#include "model/partition.h"
#include "src/plan/train_options.h"

namespace nb {

// --pipeline-layout when given (partition_model_by_layout), else --pipeline-cut: params (partition_model) or cost
// (partition_model_by_cost at --seq-length, each stage within `fits`; src/run/cut_memory.h gives the bound of the
// memory check, empty: no bound; with chunks per rank then balanced by rank: src/plan/rank_balance.h), into
// --stages parts, or --stages x the schedule's chunks per rank (interleaved 1F1B's V, zb-v's 2). UsageError for more parts
// than layers, and for a layout whose count is not the parts or whose sum is not the layers.
StageCut choose_pipeline_cut(const TrainOptions& options, const StageFits& fits = {});

// "cost", "params" or "--pipeline-layout 3,4,4,2": how the options cut, for header lines.
std::string describe_cut_choice(const TrainOptions& options);

}  // namespace nb

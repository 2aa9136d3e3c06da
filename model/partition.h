// Cutting the model into pipeline stages.
#pragma once

#include <string>
#include <vector>

#include "model/config.h"
#include "model/stage_model.h"

namespace nb {

// Contiguous, balanced by parameter count: minimises the largest stage's parameter count (stage 0 holds the
// embedding, the last stage the final norm and LM head, every stage at least one block). Among equally
// balanced cuts, earlier stages get fewer blocks: under 1F1B they hold more microbatches in flight.
// UsageError when there are more stages than blocks; num_stages >= 1 (the plan checks --stages).
std::vector<StageSpec> partition_model(const ModelConfig& config, int num_stages);

// What each stage holds, for log lines: "blocks 0-1 | 2-3 | 4".
std::string describe_cut(const std::vector<StageSpec>& cut);

}  // namespace nb

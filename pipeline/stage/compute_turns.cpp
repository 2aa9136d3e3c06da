#include "pipeline/stage/compute_turns.h"

#include <stdexcept>

#include <fmt/format.h>

namespace nb {

ComputeTurns::ComputeTurns(const StagePlan& rank_plan) {
    for (const Action& a : rank_plan)
        if (uses_weights(a.type)) chunks_.push_back(a.chunk);
}

void ComputeTurns::took(int chunk) {
    if (!is_turn(chunk))
        throw std::logic_error(fmt::format("chunk {} computed out of turn (the rank's list has chunk {} next)", chunk,
                                           next_chunk()));
    ++next_;
}

}  // namespace nb

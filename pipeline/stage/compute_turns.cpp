#include "pipeline/stage/compute_turns.h"

#include <stdexcept>

#include <fmt/format.h>

namespace nb {

ComputeTurns::ComputeTurns(std::unique_ptr<ActionSource> rank_actions) : rank_actions_(std::move(rank_actions)) {
    find_next();
}

void ComputeTurns::find_next() {
    next_chunk_ = -1;
    while (std::optional<Action> a = rank_actions_->next())
        if (uses_weights(a->type)) {
            next_chunk_ = a->chunk;
            return;
        }
}

void ComputeTurns::took(int chunk) {
    if (!is_turn(chunk))
        throw std::logic_error(fmt::format("chunk {} computed out of turn (the rank's list has chunk {} next)", chunk,
                                           next_chunk()));
    find_next();
}

}  // namespace nb

#include "pipeline/stage/stop_vote.h"

#include <algorithm>
#include <stdexcept>

namespace nb {

StopVote::StopVote(bool enabled, int num_stages, int64_t first, int64_t end)
    : enabled_(enabled),
      num_stages_(num_stages),
      lag_(std::max(num_stages, 2)),
      stop_(end),
      next_take_(first),
      voted_until_(first) {}

void StopVote::vote(Transport& transport, int64_t iteration, int stop_signal) {
    if (!enabled_) return;
    if (iteration != voted_until_)
        throw std::logic_error("stop vote of iteration " + std::to_string(iteration) + " out of order");
    transport.start_allgather({Channel::stop_vote, iteration}, {static_cast<double>(stop_signal)},
                              std::vector<int64_t>(static_cast<size_t>(num_stages_), 1));
    ++voted_until_;
}

int64_t StopVote::open_until() const {
    if (!enabled_) return stop_ - 1;
    return std::min(stop_ - 1, next_take_ + lag_ - 1);
}

// Iteration i runs unless the vote of i - L (or an earlier one) stopped the run.
bool StopVote::known(Transport& transport, int64_t iteration) {
    while (iteration > open_until() && iteration < stop_)
        if (!take_next(transport)) return false;
    return true;
}

bool StopVote::take_next(Transport& transport) {
    if (next_take_ >= voted_until_) return false;  // this stage has not voted on it yet: it must run on first
    const auto all = transport.try_take_allgather({Channel::stop_vote, next_take_});
    if (!all) return false;
    const auto asked = std::find_if(all->begin(), all->end(), [](const auto& v) { return !v.empty() && v[0] != 0; });
    if (asked != all->end() && !stopped_early_ && next_take_ + lag_ < stop_) {
        stop_ = next_take_ + lag_;
        stopped_early_ = true;
        stop_signal_ = static_cast<int>((*asked)[0]);
    }
    ++next_take_;
    return true;
}

bool StopVote::drain(Transport& transport) {
    while (next_take_ < voted_until_)
        if (!take_next(transport)) return false;
    return true;
}

}  // namespace nb

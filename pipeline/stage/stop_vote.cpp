#include "pipeline/stage/stop_vote.h"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

namespace nb {

StopVote::StopVote(bool enabled, int num_stages, int64_t first, int64_t end, Transport* replicas, int stage)
    : enabled_(enabled),
      num_stages_(num_stages),
      lag_(std::max(num_stages, 2)),
      stop_(end),
      next_take_(first),
      voted_until_(first),
      replicas_(replicas),
      stage_(stage) {}

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

std::string StopVote::waits_for() const {
    if (next_take_ >= voted_until_)
        return fmt::format("this stage's own stop vote after iteration {} (whether iteration {} runs)", next_take_,
                           next_take_ + lag_);
    return fmt::format("the stop vote after iteration {} (whether iteration {} runs): {}", next_take_,
                       next_take_ + lag_,
                       pipeline_signal_ ? "the other replicas' outcomes of it" : "every stage's all-gather of it");
}

// Iteration i runs unless the vote of i - L (or an earlier one) stopped the run.
bool StopVote::known(Transport& transport, int64_t iteration) {
    while (iteration > open_until() && iteration < stop_)
        if (!take_next(transport)) return false;
    return true;
}

MessageTag StopVote::replica_tag() const { return {Channel::stop_vote, next_take_ * num_stages_ + stage_}; }

bool StopVote::take_next(Transport& transport) {
    if (next_take_ >= voted_until_) return false;  // this stage has not voted on it yet: it must run on first
    if (!pipeline_signal_) {
        const auto all = transport.try_take_allgather({Channel::stop_vote, next_take_});
        if (!all) return false;
        const auto asked = std::find_if(all->begin(), all->end(), [](const auto& v) { return !v.empty() && v[0] != 0; });
        pipeline_signal_ = asked == all->end() ? 0 : static_cast<int>((*asked)[0]);
        if (replicas_) {
            const int me = replicas_->stage();
            replica_signals_.assign(static_cast<size_t>(replicas_->num_stages()), std::nullopt);
            replica_signals_[static_cast<size_t>(me)] = *pipeline_signal_;
            for (int r = 0; r < replicas_->num_stages(); ++r) {
                if (r == me) continue;
                replicas_->post_recv_values(r, replica_tag(), 1);
                replicas_->send_values(r, replica_tag(), {static_cast<double>(*pipeline_signal_)});
            }
        }
    }
    int signal = *pipeline_signal_;
    if (replicas_ && !take_replica_votes(signal)) return false;
    if (signal != 0 && !stopped_early_ && next_take_ + lag_ < stop_) {
        stop_ = next_take_ + lag_;
        stopped_early_ = true;
        stop_signal_ = signal;
    }
    pipeline_signal_.reset();
    ++next_take_;
    return true;
}

// The other replicas' outcomes of the vote being taken; once all are in, `signal` = the first asking one in
// replica order.
bool StopVote::take_replica_votes(int& signal) {
    bool all = true;
    for (int r = 0; r < static_cast<int>(replica_signals_.size()); ++r) {
        auto& v = replica_signals_[static_cast<size_t>(r)];
        if (v) continue;
        if (auto got = replicas_->try_take_values(r, replica_tag())) v = got->at(0);
        all &= v.has_value();
    }
    if (!all) return false;
    signal = 0;
    for (const auto& v : replica_signals_)
        if (*v != 0) {
            signal = static_cast<int>(*v);
            break;
        }
    return true;
}

bool StopVote::drain(Transport& transport) {
    while (next_take_ < voted_until_)
        if (!take_next(transport)) return false;
    return true;
}

}  // namespace nb

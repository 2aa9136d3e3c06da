#include "pipeline/schedule/action_stream.h"

#include <algorithm>

namespace nb {

ScheduleActions::ScheduleActions(const ScheduleSpec& spec, int rank, int64_t first_step, int64_t end_step,
                                 std::optional<int> chunk)
    : spec_(spec),
      rank_(rank),
      chunk_(chunk),
      first_step_(first_step),
      end_step_(std::min(end_step, spec.optimizer_steps())),
      phases_(phases_of(spec)),
      expander_(spec, rank) {
    size_t phase = 0;  // the phases before the first step are skipped whole
    while (phase < phases_.size() && phases_[phase].end_step <= first_step_) ++phase;
    enter_phase(phase);
}

void ScheduleActions::enter_phase(size_t phase) {
    phase_ = phase;
    step_order_.clear();
    in_step_ = 0;
    stream_.reset();
    if (phase_ >= phases_.size()) return;
    const Phase& p = phases_[phase_];
    step_ = std::max(p.first_step, first_step_);
    if (p.synchronous) return;
    const int64_t per_step = spec_.microbatches_per_step();
    stream_.emplace(p.first_step * per_step, (p.end_step - p.first_step) * per_step, spec_.stages, rank_);
    // Nothing before the first step's first forward has a microbatch of the first step or later.
    position_ = stream_->forward_position(step_ * per_step - stream_->first);
}

std::optional<Compute> ScheduleActions::next_compute() {
    const int64_t per_step = spec_.microbatches_per_step();
    const int64_t first_mb = first_step_ * per_step, end_mb = end_step_ * per_step;
    auto in_range = [&](const Compute& c) { return c.microbatch >= first_mb && c.microbatch < end_mb; };
    while (phase_ < phases_.size()) {
        if (phases_[phase_].synchronous) {
            while (in_step_ < step_order_.size()) {
                const Compute& c = step_order_[in_step_++];
                if (in_range(c)) return c;
            }
            if (step_ < std::min(phases_[phase_].end_step, end_step_)) {
                step_order_.clear();
                in_step_ = 0;
                append_step_order(spec_, rank_, step_++, step_order_);
                continue;
            }
        } else {
            // The last compute of a microbatch before the end is the end's last backward: nothing after it is due.
            const int64_t last_mb = std::min(end_mb, stream_->first + stream_->count) - 1;
            const int64_t stop =
                last_mb < stream_->first ? 0 : stream_->backward_position(last_mb - stream_->first) + 1;
            while (position_ < stop) {
                const Compute c = stream_->at(position_++);
                if (in_range(c)) return c;
            }
        }
        enter_phase(phase_ + 1);
    }
    return std::nullopt;
}

std::optional<Action> ScheduleActions::next() {
    while (true) {
        while (taken_ < expanded_.size()) {
            const Action& a = expanded_[taken_++];
            if ((!chunk_ || a.chunk == *chunk_) && a.step < end_step_) return a;
        }
        if (computes_done_) return std::nullopt;
        expanded_.clear();
        taken_ = 0;
        if (const std::optional<Compute> c = next_compute()) {
            expander_.add(*c, expanded_);
        } else {
            expander_.finish(expanded_);
            computes_done_ = true;
        }
    }
}

void ScheduleActions::end_before_step(int64_t step) { end_step_ = std::min(end_step_, step); }

std::optional<Action> ListedActions::next() {
    while (next_ < plan_.size()) {
        const Action& a = plan_[next_++];
        if (a.step < end_step_) return a;
    }
    return std::nullopt;
}

std::vector<Action> drain(ActionSource& source) {
    std::vector<Action> all;
    while (std::optional<Action> a = source.next()) all.push_back(*a);
    return all;
}

}  // namespace nb

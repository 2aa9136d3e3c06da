#include "pipeline/schedule/version_uses.h"

namespace nb {

namespace {

// The first x in [lo, hi) with at_least(x), or hi (at_least must be false, then true, over the range).
template <typename Predicate>
int64_t first_where(int64_t lo, int64_t hi, Predicate at_least) {
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (at_least(mid))
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

}  // namespace

VersionUses::VersionUses(const ScheduleSpec& spec, int rank, int64_t first_step, bool optimizer_reads_stale)
    : spec_(spec),
      rank_(rank),
      first_step_(first_step),
      end_step_(spec.optimizer_steps()),
      optimizer_reads_stale_(optimizer_reads_stale) {}

int64_t VersionUses::gradient_version(int64_t step) const {
    return weight_version(spec_, rank_, (step + 1) * spec_.microbatches_per_step() - 1);
}

void VersionUses::count_from(const StagePlan& plan) {
    listed_.emplace();
    for (const Action& a : plan)
        if (a.type == ActionType::forward || a.type == ActionType::backward || a.type == ActionType::backward_input ||
            a.type == ActionType::backward_weight)
            ++(*listed_)[a.version];
}

int64_t VersionUses::uses(int64_t version) const {
    if (listed_) return listed_->contains(version) ? listed_->at(version) : 0;
    const int64_t per_step = spec_.microbatches_per_step();
    const int64_t first_mb = first_step_ * per_step, end_mb = end_step_ * per_step;
    auto microbatch_from = [&](int64_t v) {
        return first_where(first_mb, end_mb, [&](int64_t mb) { return weight_version(spec_, rank_, mb) >= v; });
    };
    // Each microbatch: a forward and a backward, or a forward, B and W.
    const int64_t per_microbatch = splits_backward(spec_.kind) ? 3 : 2;
    int64_t count = per_microbatch * (microbatch_from(version + 1) - microbatch_from(version));
    if (optimizer_reads_stale_) {
        auto step_from = [&](int64_t v) {
            return first_where(first_step_, end_step_, [&](int64_t t) { return gradient_version(t) >= v; });
        };
        // The steps whose gradient came from W_version, those after step `version` reading it stale.
        const int64_t stale_from = std::max(step_from(version), version + 1), stale_end = step_from(version + 1);
        count += std::max<int64_t>(0, stale_end - stale_from);
    }
    return count;
}

std::optional<int64_t> VersionUses::stale_version_of_step(int64_t step) const {
    if (!optimizer_reads_stale_ || step < first_step_ || step >= end_step_) return std::nullopt;
    const int64_t version = gradient_version(step);
    if (version >= step) return std::nullopt;
    return version;
}

bool VersionUses::has_synchronous_use(int64_t version) const {
    // A step's microbatches share one version (pipedream's steps are single microbatches).
    return version >= first_step_ && version < end_step_ &&
           weight_version(spec_, rank_, version * spec_.microbatches_per_step()) == version;
}

int64_t VersionUses::oldest_used() const {
    if (listed_ && !listed_->empty()) return listed_->begin()->first;
    return weight_version(spec_, rank_, first_step_ * spec_.microbatches_per_step());
}

}  // namespace nb

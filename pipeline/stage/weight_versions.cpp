#include "pipeline/stage/weight_versions.h"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

#include "src/core/error.h"
#include "src/ops/ops.h"
#include "pipeline/stage/weight_history.h"

namespace nb {

WeightVersions::WeightVersions(Ops& ops, const ParamLayout& layout, const TensorSet& master, const StagePlan& plan,
                               bool optimizer_reads_stale, PredictWeights predict)
    : ops_(ops), master_(master), compute_(make_compute_weights(ops, layout, master)), predict_(std::move(predict)) {
    int64_t last_backward_version = 0;
    std::set<int64_t> synchronous_uses;
    for (const Action& a : plan) {
        if (uses_weights(a.type)) {
            ++uses_left_[a.version];
            if (a.version == a.step) synchronous_uses.insert(a.version);
        }
        if (ends_microbatch(a.type)) last_backward_version = a.version;
        // The step's gradient is that of its backwards, which all use one version: the last one's.
        if (a.type == ActionType::optimizer_step && optimizer_reads_stale && last_backward_version < a.step) {
            ++uses_left_[last_backward_version];
            stale_of_step_[a.step] = last_backward_version;
        }
    }
    if (!predict_) return;
    for (const auto& [version, uses] : uses_left_)
        if (version >= 1 && !synchronous_uses.contains(version)) predicted_versions_.insert(version);
    if (!predicted_versions_.empty()) predicted_ = make_separate_compute_weights(ops, layout, master);
}

void WeightVersions::predict_newest() {
    if (!is_predicted(newest_)) return;
    predict_(master_, *predicted_);
}

std::optional<int64_t> WeightVersions::stale_version_of_step(int64_t step) const {
    auto it = stale_of_step_.find(step);
    if (it == stale_of_step_.end()) return std::nullopt;
    return it->second;
}

const TensorSet& WeightVersions::at(int64_t version) const {
    if (version == newest_) return is_predicted(version) ? *predicted_ : compute_;
    auto it = snapshots_.find(version);
    if (it != snapshots_.end()) return it->second;
    std::string held = fmt::format("W{}", newest_);
    for (const auto& [v, weights] : snapshots_) held += fmt::format(", W{}", v);
    throw std::logic_error(fmt::format("weight version W{} is not held (holds {})", version, held));
}

void WeightVersions::release(int64_t version) {
    auto it = uses_left_.find(version);
    if (it == uses_left_.end() || it->second <= 0)
        throw std::logic_error(fmt::format("weight version W{} used more often than the plan says", version));
    if (--it->second == 0) {
        uses_left_.erase(it);
        snapshots_.erase(version);  // nothing when it is the newest: that one stays
    }
}

void WeightVersions::before_update() {
    auto it = uses_left_.find(newest_);
    if (it == uses_left_.end()) return;  // no later use: the update may overwrite it
    snapshots_.emplace(newest_, clone_tensors(at(newest_)));
}

void WeightVersions::after_update(int64_t new_version) {
    if (new_version <= newest_)
        throw std::logic_error(fmt::format("weight version W{} made after W{}", new_version, newest_));
    refresh_compute_weights(ops_, master_, compute_);
    newest_ = new_version;
    predict_newest();
    peak_ = std::max(peak_, held());
}

std::map<int64_t, const TensorSet*> WeightVersions::older_versions() const {
    std::map<int64_t, const TensorSet*> older;
    for (const auto& [version, weights] : snapshots_) older.emplace(version, &weights);
    return older;
}

void WeightVersions::restore(int64_t newest, std::map<int64_t, TensorSet> older, const std::string& source) {
    for (const auto& [version, uses] : uses_left_)
        if (version < newest && !older.contains(version))
            throw RuntimeError(fmt::format("'{}': holds no weight version W{}, which this stage uses after W{}",
                                           source, version, newest));
    std::erase_if(older, [&](const auto& entry) { return !uses_left_.contains(entry.first); });
    refresh_compute_weights(ops_, master_, compute_);
    newest_ = newest;
    predict_newest();
    snapshots_ = std::move(older);
    peak_ = std::max(peak_, held());
}

}  // namespace nb

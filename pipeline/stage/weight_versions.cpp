#include "pipeline/stage/weight_versions.h"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

#include "src/core/error.h"
#include "src/ops/ops.h"
#include "pipeline/stage/weight_history.h"

namespace nb {

WeightVersions::WeightVersions(Ops& ops, const ParamLayout& layout, const TensorSet& master, VersionUses uses,
                               PredictWeights predict)
    : ops_(ops),
      layout_(layout),
      master_(master),
      compute_(make_compute_weights(ops, layout, master)),
      predict_(std::move(predict)),
      uses_(std::move(uses)) {}

bool WeightVersions::is_predicted(int64_t version) const {
    return predict_ && version >= 1 && uses_.uses(version) > 0 && !uses_.has_synchronous_use(version);
}

int64_t WeightVersions::uses_left(int64_t version) const {
    if (auto it = uses_left_.find(version); it != uses_left_.end()) return it->second;
    return version <= used_up_through_ ? 0 : uses_.uses(version);
}

void WeightVersions::predict_newest() {
    if (!is_predicted(newest_)) return;
    if (!predicted_) predicted_ = make_separate_compute_weights(ops_, layout_, master_);
    predict_(master_, *predicted_);
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
    const int64_t left = uses_left(version);
    if (left <= 0)
        throw std::logic_error(fmt::format("weight version W{} used more often than the plan says", version));
    if (left > 1) {
        uses_left_[version] = left - 1;
        return;
    }
    uses_left_.erase(version);
    used_up_through_ = std::max(used_up_through_, version);
    snapshots_.erase(version);  // nothing when it is the newest: that one stays
}

void WeightVersions::before_update() {
    if (uses_left(newest_) == 0) return;  // no later use: the update may overwrite it
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
    for (int64_t version = uses_.oldest_used(); version < newest; ++version)
        if (uses_left(version) > 0 && !older.contains(version))
            throw RuntimeError(fmt::format("'{}': holds no weight version W{}, which this stage uses after W{}",
                                           source, version, newest));
    std::erase_if(older, [&](const auto& entry) { return uses_left(entry.first) == 0; });
    refresh_compute_weights(ops_, master_, compute_);
    newest_ = newest;
    predict_newest();
    snapshots_ = std::move(older);
    peak_ = std::max(peak_, held());
}

}  // namespace nb

#include "pipeline/stage/weight_history.h"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

namespace nb {

WeightHistory::WeightHistory(int num_stages)
    : versions_(static_cast<size_t>(num_stages)), peak_(static_cast<size_t>(num_stages), 0) {}

const std::map<int64_t, TensorSet>& WeightHistory::versions_of(int stage) const {
    if (stage < 0 || stage >= num_stages())
        throw std::logic_error(fmt::format("weight history: no stage {} (there are {})", stage, num_stages()));
    return versions_[static_cast<size_t>(stage)];
}

void WeightHistory::add(int stage, int64_t version, TensorSet weights) {
    const auto& held_now = versions_of(stage);
    if (!held_now.empty() && version <= held_now.rbegin()->first)
        throw std::logic_error(fmt::format("weight history: stage {} adds version {} after version {}", stage,
                                           version, held_now.rbegin()->first));
    auto& versions = versions_[static_cast<size_t>(stage)];
    versions.emplace(version, std::move(weights));
    int& peak = peak_[static_cast<size_t>(stage)];
    peak = std::max(peak, static_cast<int>(versions.size()));
}

const TensorSet& WeightHistory::at(int stage, int64_t version) const {
    const auto& versions = versions_of(stage);
    auto it = versions.find(version);
    if (it == versions.end()) {
        const std::string held = versions.empty() ? std::string("none")
                                                  : fmt::format("{}..{}", versions.begin()->first,
                                                                versions.rbegin()->first);
        throw std::logic_error(fmt::format("weight history: stage {} does not hold version {} (holds {})", stage,
                                           version, held));
    }
    return it->second;
}

int64_t WeightHistory::newest(int stage) const {
    const auto& versions = versions_of(stage);
    if (versions.empty()) throw std::logic_error(fmt::format("weight history: stage {} holds no version", stage));
    return versions.rbegin()->first;
}

void WeightHistory::replace(int stage, std::map<int64_t, TensorSet> versions) {
    versions_of(stage);  // checks the stage
    versions_[static_cast<size_t>(stage)] = std::move(versions);
    int& peak = peak_[static_cast<size_t>(stage)];
    peak = std::max(peak, held(stage));
}

void WeightHistory::drop_older_than(int stage, int64_t version) {
    versions_of(stage);  // checks the stage
    auto& versions = versions_[static_cast<size_t>(stage)];
    versions.erase(versions.begin(), versions.lower_bound(version));
}

int WeightHistory::held(int stage) const { return static_cast<int>(versions_of(stage).size()); }

int WeightHistory::peak_held(int stage) const {
    versions_of(stage);
    return peak_[static_cast<size_t>(stage)];
}

TensorSet clone_tensors(const TensorSet& tensors) {
    TensorSet copy;
    for (const Tensor& t : tensors.tensors) copy.tensors.push_back(t.clone());
    return copy;
}

}  // namespace nb

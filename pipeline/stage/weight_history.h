// WeightHistory: for every pipeline stage, the weight versions it still needs, kept explicitly.
//
// Version v of a stage is W_v, its weights after v optimizer steps (docs/DESIGN.md section 2). Each version is an
// immutable snapshot, added once, read by the microbatches that use it, and dropped when no later microbatch
// will: this is PipeDream's weight stashing and PipeDream-2BW's double buffer, written as a plain map from
// version number to weights. The oracle (reference.h) keeps one, and its peak size per stage is the number of
// versions the schedule really needs (1 for gpipe/1f1b, 2 for 2bw, p - s for pipedream at stage s).
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "model/params.h"

namespace nb {

class WeightHistory {
public:
    explicit WeightHistory(int num_stages);

    int num_stages() const { return static_cast<int>(versions_.size()); }

    // Adds W_version of `stage`. Versions arrive in increasing order: std::logic_error otherwise.
    void add(int stage, int64_t version, TensorSet weights);

    // W_version of `stage`. std::logic_error naming stage and version when it is not held (never added, or
    // already dropped): a microbatch asking for it would compute on the wrong weights.
    const TensorSet& at(int stage, int64_t version) const;

    // The newest version `stage` holds (its current weights). std::logic_error when it holds none.
    int64_t newest(int stage) const;
    const TensorSet& newest_weights(int stage) const { return at(stage, newest(stage)); }

    // Every version `stage` holds, by version (a checkpoint saves those older than the newest).
    const std::map<int64_t, TensorSet>& versions(int stage) const { return versions_of(stage); }
    // Resuming: `stage` holds exactly `versions` from now on (a checkpoint's, with the newest).
    void replace(int stage, std::map<int64_t, TensorSet> versions);

    // Forgets every version of `stage` older than `version`.
    void drop_older_than(int stage, int64_t version);

    // How many versions `stage` holds now, and the most it ever held at once.
    int held(int stage) const;
    int peak_held(int stage) const;

private:
    const std::map<int64_t, TensorSet>& versions_of(int stage) const;
    std::vector<std::map<int64_t, TensorSet>> versions_;  // per stage: version -> weights
    std::vector<int> peak_;
};

// A deep copy (new storage, same device and dtype): a snapshot that later in-place updates do not change.
TensorSet clone_tensors(const TensorSet& tensors);

}  // namespace nb

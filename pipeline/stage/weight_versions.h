// WeightVersions: the weight versions one pipeline stage holds while it runs its plan (docs/DESIGN.md section 2).
//
// Version v is W_v, the stage's weights after v optimizer steps. The newest version is the stage's compute
// weights themselves, which the optimizer updates in place; an older version exists only as a snapshot, taken
// just before the update that would overwrite it and only when a forward or backward still to come uses it
// (PipeDream's weight stashing, PipeDream-2BW's second buffer). A snapshot is dropped after its last use. The
// uses come from the schedule's rules (pipeline/schedule/version_uses.h), counted down as they run, for the versions
// in use only (a run of any length holds no table per version), so the stage holds exactly what the schedule needs:
// 1 version for gpipe/1f1b (no copy ever), 2 for 2bw, p - s for pipedream at stage s (pipeline/schedule/schedule.h's
// max_versions_held says the same).
//
// --delay-fix predict: a version that only asynchronous steps use is their prediction W_hat_v = W_v - lambda u_{v-1}
// (optim/delay_fix.h), held in a buffer of its own beside the master: forwards and backwards of it, its snapshot
// and a checkpoint's older versions are the prediction; newest() stays W_v itself (evaluation).
//
// This is pipeline/stage/weight_history.h's idea (an explicit map from version to weights) for one stage that runs
// a schedule's action list, where the oracle's history serves stages that step in lockstep.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "model/params.h"
#include "pipeline/schedule/version_uses.h"

namespace nb {

class Ops;

// Writes the prediction of the master's weights into `out` (compute weights apart from the master's storage).
using PredictWeights = std::function<void(const TensorSet& master, TensorSet& out)>;

class WeightVersions {
public:
    // `master`: the stage's f32 master weights, which hold W_0 now and which the optimizer will update (they
    // must outlive this object, as `layout`). `uses`: the stage's uses of each version by its forwards and
    // backwards, and with --delay-fix taylor by an optimizer step whose gradient came from an older version than
    // the newest (stale_version_of_step; it is released after the compensation).
    // `predict` (--delay-fix predict; empty: none): makes the predicted versions, those at least 1 that no
    // synchronous use (an action of step v on version v) reads.
    WeightVersions(Ops& ops, const ParamLayout& layout, const TensorSet& master, VersionUses uses,
                   PredictWeights predict = {});

    // With optimizer_reads_stale: the version optimizer step `step`'s gradient was computed at, when it is older
    // than W_step (the step then uses it once more: release it when done); nullopt otherwise.
    std::optional<int64_t> stale_version_of_step(int64_t step) const { return uses_.stale_version_of_step(step); }

    // W_version, for a forward or backward. std::logic_error naming the version and what is held when it is
    // not held: the plan asks for a version that does not exist yet or was dropped.
    const TensorSet& at(int64_t version) const;
    // The newest weights themselves (never a prediction): what an evaluation runs on.
    const TensorSet& newest() const { return compute_; }
    // Whether W_version is held as its prediction.
    bool is_predicted(int64_t version) const;

    // One forward or backward of `version` is done: a snapshot whose uses are over is dropped.
    void release(int64_t version);

    // Around the optimizer's in-place update of the master, which makes `new_version`: before it, snapshot the
    // newest version if uses of it are still to come; after it, refresh the compute weights from the master.
    void before_update();
    void after_update(int64_t new_version);

    // The versions older than the newest that are held now (what a checkpoint saves beside the master).
    std::map<int64_t, const TensorSet*> older_versions() const;
    // Resuming after `newest` optimizer steps (the master holds W_newest again): the compute weights are
    // refreshed from the master and the older versions taken from `older` (a checkpoint's). nb::RuntimeError
    // naming `source` when one that the plan still uses is not there; a version it does not use is dropped.
    void restore(int64_t newest, std::map<int64_t, TensorSet> older, const std::string& source);

    int held() const { return static_cast<int>(snapshots_.size()) + 1; }
    int peak_held() const { return peak_; }

private:
    Ops& ops_;
    const ParamLayout& layout_;
    const TensorSet& master_;
    TensorSet compute_;  // W_newest: the master itself where the backend computes in f32
    int64_t newest_ = 0;
    PredictWeights predict_;
    std::optional<TensorSet> predicted_;  // the newest version's prediction, made when one is first predicted
    std::map<int64_t, TensorSet> snapshots_;  // older versions still to be used
    VersionUses uses_;
    // Uses still to come of the versions in use (one has begun); the others have all of uses_.uses(v) to come,
    // or, up to `used_up_through_`, none: a version's uses end only after every older version's have.
    std::map<int64_t, int64_t> uses_left_;
    int64_t used_up_through_ = -1;
    int peak_ = 1;

    int64_t uses_left(int64_t version) const;

    // After the master holds W_newest_: its prediction, if it is a predicted version.
    void predict_newest();
};

}  // namespace nb

#include "optim/optimizer_shards.h"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

#include "optim/muon.h"
#include "optim/stage_optimizer.h"

namespace nb {

bool shards_whole_tensor(std::string_view optimizer, const ParamInfo& info) {
    if (optimizer == "muon") return Muon::takes_muon(info);
    if (optimizer == "soap") return info.shape.size() == 2;
    return false;
}

std::vector<int64_t> optimizer_shard_bytes(const OptimizerConfig& optimizer, const DelayFixConfig& delay_fix,
                                           const ParamLayout& layout, int replicas) {
    if (replicas < 1) throw std::invalid_argument(fmt::format("optimizer_shard_bytes: {} replicas", replicas));
    // Each tensor's state alone (the state of a one-tensor layout); the even part summed, the whole ones listed.
    int64_t even = 0;
    std::vector<int64_t> whole;
    for (const ParamInfo& info : layout.params()) {
        ParamLayout one;
        one.add(info);
        const int64_t bytes = stage_optimizer_state_bytes(optimizer, delay_fix, one);
        if (shards_whole_tensor(optimizer.name, info)) whole.push_back(bytes);
        else even += bytes;
    }
    std::vector<int64_t> owned(static_cast<size_t>(replicas), (even + replicas - 1) / replicas);
    std::stable_sort(whole.begin(), whole.end(), [](int64_t a, int64_t b) { return a > b; });
    for (const int64_t bytes : whole) *std::min_element(owned.begin(), owned.end()) += bytes;
    return owned;
}

}  // namespace nb

#include "optim/optimizer_shards.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>

#include <fmt/format.h>

#include "optim/stage_optimizer.h"

namespace nb {

namespace {

// Each tensor's state alone: the state of a one-tensor layout (0 for a buffer).
std::vector<int64_t> state_bytes_per_tensor(const OptimizerConfig& optimizer, const DelayFixConfig& delay_fix,
                                            const ParamLayout& layout) {
    std::vector<int64_t> bytes;
    for (const ParamInfo& info : layout.params()) {
        ParamLayout one;
        one.add(info);
        bytes.push_back(stage_optimizer_state_bytes(optimizer, delay_fix, one));
    }
    return bytes;
}

}  // namespace

std::vector<int> optimizer_tensor_owners(const OptimizerConfig& optimizer, const DelayFixConfig& delay_fix,
                                         const ParamLayout& layout, int replicas) {
    if (replicas < 1) throw std::invalid_argument(fmt::format("optimizer_tensor_owners: {} replicas", replicas));
    const std::vector<int64_t> bytes = state_bytes_per_tensor(optimizer, delay_fix, layout);
    std::vector<int> order(bytes.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return bytes[a] > bytes[b]; });
    std::vector<int64_t> owned(static_cast<size_t>(replicas), 0);
    std::vector<int> owners(bytes.size(), 0);
    for (int i : order) {
        const auto least = std::min_element(owned.begin(), owned.end()) - owned.begin();
        owners[static_cast<size_t>(i)] = static_cast<int>(least);
        owned[static_cast<size_t>(least)] += bytes[static_cast<size_t>(i)];
    }
    return owners;
}

std::vector<int> owned_tensors(const std::vector<int>& owners, int replica) {
    std::vector<int> out;
    for (size_t i = 0; i < owners.size(); ++i)
        if (owners[i] == replica) out.push_back(static_cast<int>(i));
    return out;
}

std::vector<int64_t> optimizer_shard_bytes(const OptimizerConfig& optimizer, const DelayFixConfig& delay_fix,
                                           const ParamLayout& layout, int replicas) {
    const std::vector<int> owners = optimizer_tensor_owners(optimizer, delay_fix, layout, replicas);
    const std::vector<int64_t> bytes = state_bytes_per_tensor(optimizer, delay_fix, layout);
    std::vector<int64_t> owned(static_cast<size_t>(replicas), 0);
    for (size_t i = 0; i < owners.size(); ++i) owned[static_cast<size_t>(owners[i])] += bytes[i];
    return owned;
}

}  // namespace nb

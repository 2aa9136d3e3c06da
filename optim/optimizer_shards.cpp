#include "optim/optimizer_shards.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>

#include <fmt/format.h>

#include "optim/muon.h"
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

int64_t rows_of(const ParamInfo& info) { return info.shape.empty() ? 1 : info.shape[0]; }

}  // namespace

bool shards_by_rows(const OptimizerConfig& optimizer, const ParamInfo& info) {
    if (!info.trainable()) return false;
    if (optimizer.name == "muon") return !Muon::takes_muon(info);
    return optimizer.name == "adamw" || optimizer.name == "lion" || optimizer.name == "adan";
}

std::vector<TensorShard> optimizer_shards(const OptimizerConfig& optimizer, const DelayFixConfig& delay_fix,
                                          const ParamLayout& layout, int replicas) {
    if (replicas < 1) throw std::invalid_argument(fmt::format("optimizer_shards: {} replicas", replicas));
    const std::vector<int64_t> bytes = state_bytes_per_tensor(optimizer, delay_fix, layout);
    std::vector<TensorShard> shards;
    std::vector<int64_t> owned(static_cast<size_t>(replicas), 0);
    // The rows part: a row goes to the replica whose D-th of the part's bytes holds the row's first byte (in
    // layout order): replica 0 fills first, then 1, ... Owners never decrease, so a replica gets one run of rows of
    // a tensor at most.
    int64_t even = 0;
    for (int i = 0; i < layout.size(); ++i)
        if (shards_by_rows(optimizer, layout[i])) even += bytes[static_cast<size_t>(i)];
    int64_t before = 0;  // bytes of the rows part before the tensor's row 0
    for (int i = 0; i < layout.size(); ++i) {
        if (!shards_by_rows(optimizer, layout[i])) continue;
        const int64_t rows = rows_of(layout[i]), tensor_bytes = bytes[static_cast<size_t>(i)];
        const auto owner_of_row = [&](int64_t row) {
            const int64_t at = before + tensor_bytes * row / rows;
            return static_cast<int>(std::min<int64_t>(replicas - 1, at * replicas / even));
        };
        for (int64_t row = 0; row < rows;) {
            const int owner = owner_of_row(row);
            int64_t end = row + 1;
            while (end < rows && owner_of_row(end) == owner) ++end;
            shards.push_back({i, row, end, owner});
            owned[static_cast<size_t>(owner)] += tensor_bytes * end / rows - tensor_bytes * row / rows;
            row = end;
        }
        before += tensor_bytes;
    }
    // The whole tensors, largest state first onto the least loaded.
    std::vector<int> whole;
    for (int i = 0; i < layout.size(); ++i)
        if (!shards_by_rows(optimizer, layout[i])) whole.push_back(i);
    std::stable_sort(whole.begin(), whole.end(),
                     [&](int a, int b) { return bytes[static_cast<size_t>(a)] > bytes[static_cast<size_t>(b)]; });
    for (int i : whole) {
        const auto least = static_cast<int>(std::min_element(owned.begin(), owned.end()) - owned.begin());
        shards.push_back({i, 0, rows_of(layout[i]), least});
        owned[static_cast<size_t>(least)] += bytes[static_cast<size_t>(i)];
    }
    std::stable_sort(shards.begin(), shards.end(), [](const TensorShard& a, const TensorShard& b) {
        return a.tensor != b.tensor ? a.tensor < b.tensor : a.row_begin < b.row_begin;
    });
    return shards;
}

std::vector<TensorShard> owned_shards(const std::vector<TensorShard>& shards, int replica) {
    std::vector<TensorShard> out;
    for (const TensorShard& s : shards)
        if (s.owner == replica) out.push_back(s);
    return out;
}

std::vector<int64_t> optimizer_shard_bytes(const OptimizerConfig& optimizer, const DelayFixConfig& delay_fix,
                                           const ParamLayout& layout, int replicas) {
    const std::vector<int64_t> bytes = state_bytes_per_tensor(optimizer, delay_fix, layout);
    std::vector<int64_t> owned(static_cast<size_t>(replicas), 0);
    for (const TensorShard& s : optimizer_shards(optimizer, delay_fix, layout, replicas)) {
        const int64_t rows = rows_of(layout[s.tensor]), b = bytes[static_cast<size_t>(s.tensor)];
        owned[static_cast<size_t>(s.owner)] += b * s.row_end / rows - b * s.row_begin / rows;
    }
    return owned;
}

}  // namespace nb

#include "model/moe_load.h"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

namespace nb {

std::vector<double> expert_tokens(const Tensor& expert_offsets) {
    const Tensor host = expert_offsets.to(Device::cpu);
    const int32_t* off = host.i32();
    std::vector<double> tokens;
    for (int64_t e = 0; e + 1 < host.numel(); ++e) tokens.push_back(static_cast<double>(off[e + 1] - off[e]));
    return tokens;
}

LoadFigures load_figures(const std::vector<double>& tokens) {
    if (tokens.empty()) throw std::logic_error("load_figures: no experts");
    double total = 0, most = 0, idle = 0;
    for (const double t : tokens) {
        total += t;
        most = std::max(most, t);
        idle += t == 0 ? 1 : 0;
    }
    const double experts = static_cast<double>(tokens.size());
    return {total > 0 ? most / (total / experts) : 0.0, idle / experts};
}

void MoeLoadCounter::dispatch_ends(int64_t block, bool backward, const Tensor& expert_offsets, const Tensor& aux_loss) {
    if (backward) return;
    const std::vector<double> tokens = expert_tokens(expert_offsets);
    const float aux = aux_loss.to(Device::cpu).f32()[0];
    auto it = std::lower_bound(blocks_.begin(), blocks_.end(), block,
                               [](const MoeBlockLoad& b, int64_t i) { return b.block < i; });
    if (it == blocks_.end() || it->block != block)
        it = blocks_.insert(it, MoeBlockLoad{block, 0.0, std::vector<double>(tokens.size(), 0.0)});
    if (it->expert_tokens.size() != tokens.size())
        throw std::logic_error(
            fmt::format("block {}: {} experts after {}", block, tokens.size(), it->expert_tokens.size()));
    it->aux_loss_sum += static_cast<double>(aux);
    for (size_t e = 0; e < tokens.size(); ++e) it->expert_tokens[e] += tokens[e];
}

void add_replica_loads(std::vector<MoeBlockLoad>& total, const std::vector<MoeBlockLoad>& replica) {
    if (total.size() != replica.size())
        throw std::logic_error(fmt::format("MoE loads of {} blocks onto {}", replica.size(), total.size()));
    for (size_t b = 0; b < total.size(); ++b) {
        MoeBlockLoad& t = total[b];
        const MoeBlockLoad& r = replica[b];
        if (t.block != r.block || t.expert_tokens.size() != r.expert_tokens.size())
            throw std::logic_error(fmt::format("MoE loads of block {} onto block {}", r.block, t.block));
        t.aux_loss_sum += r.aux_loss_sum;
        for (size_t e = 0; e < t.expert_tokens.size(); ++e) t.expert_tokens[e] += r.expert_tokens[e];
    }
}

}  // namespace nb

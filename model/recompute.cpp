#include "model/recompute.h"

namespace nb {

RecomputeGranularity parse_recompute_granularity(std::string_view name) { return kRecomputeGranularities.parse(name); }
std::string_view recompute_granularity_name(RecomputeGranularity granularity) {
    return kRecomputeGranularities.name(granularity);
}
RecomputeMethod parse_recompute_method(std::string_view name) { return kRecomputeMethods.parse(name); }
std::string_view recompute_method_name(RecomputeMethod method) { return kRecomputeMethods.name(method); }

std::vector<int64_t> recompute_groups(const StageSpec& spec, const RecomputeConfig& config) {
    const int64_t first_block = spec.has_embedding ? 1 : 0, blocks = spec.num_blocks();
    const int64_t layers = first_block + blocks + (spec.has_head ? 1 : 0);
    std::vector<int64_t> group(static_cast<size_t>(layers), -1);
    if (!config.full()) return group;
    const int64_t n = config.num_layers;
    for (int64_t b = 0; b < blocks; ++b) {
        if (config.method == RecomputeMethod::block && b >= n) break;
        const int64_t start = config.method == RecomputeMethod::uniform ? b / n * n : b;
        group[static_cast<size_t>(first_block + b)] = first_block + start;
    }
    return group;
}

}  // namespace nb

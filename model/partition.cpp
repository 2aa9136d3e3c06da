#include "model/partition.h"

#include <algorithm>
#include <limits>
#include <stdexcept>

#include <fmt/format.h>

#include "src/core/error.h"

namespace nb {

namespace {

StageSpec make_spec(int64_t first, int64_t end, int stage, int num_stages) {
    return {first, end, stage == 0, stage == num_stages - 1};
}

}  // namespace

std::vector<StageSpec> partition_model(const ModelConfig& config, int num_stages) {
    const int64_t L = config.num_layers;
    // --stages >= 1 is checked where the plan is (check_stage_count); here it is an invariant.
    if (num_stages <= 0) throw std::logic_error(fmt::format("partition_model: {} stages", num_stages));
    if (num_stages > L)
        throw UsageError(fmt::format("{} pipeline stages but the model has only {} layers (each stage needs one)",
                                     num_stages, L));
    const int P = num_stages;
    const int64_t kInf = std::numeric_limits<int64_t>::max();
    auto load = [&](int stage, int64_t first, int64_t end) {
        return stage_param_count(config, make_spec(first, end, stage, P));
    };
    // best[s][j]: smallest possible maximum load when stages s..P-1 hold blocks j..L-1.
    std::vector<std::vector<int64_t>> best(static_cast<size_t>(P) + 1, std::vector<int64_t>(L + 1, kInf));
    best[P][L] = 0;
    for (int s = P - 1; s >= 0; --s)
        for (int64_t j = 0; j < L; ++j) {
            // Stage s holds blocks j..end-1. The later stages need a block each (the last stage takes the rest).
            const int64_t lo = s == P - 1 ? L : j + 1, hi = L - (P - 1 - s);
            if (lo > hi) continue;
            // Over [lo, hi] this stage's load grows with `end` (every block adds parameters) and the
            // rest's best does not (fewer blocks for as many stages), so max(load, rest) is least where the two
            // cross: at the first `end` whose load reaches the rest, or just before it. A binary search finds
            // it; trying every `end` made a 100000-layer model's cut take minutes.
            int64_t a = lo, b = hi + 1;  // the first end in [lo, hi] with load >= rest, or hi + 1
            while (a < b) {
                const int64_t mid = a + (b - a) / 2;
                if (load(s, j, mid) >= best[s + 1][mid]) b = mid;
                else a = mid + 1;
            }
            if (a <= hi) best[s][j] = load(s, j, a);
            if (a - 1 >= lo) best[s][j] = std::min(best[s][j], best[s + 1][a - 1]);
        }
    // Walk forward, giving each stage the fewest blocks that still reach the optimum.
    const int64_t target = best[0][0];
    std::vector<StageSpec> specs;
    int64_t first = 0;
    for (int s = 0; s < P; ++s) {
        for (int64_t end = first + 1; end <= L; ++end) {
            int64_t rest = best[s + 1][end];
            if (rest != kInf && std::max(load(s, first, end), rest) <= target) {
                specs.push_back(make_spec(first, end, s, P));
                first = end;
                break;
            }
        }
    }
    return specs;
}

std::string describe_cut(const std::vector<StageSpec>& cut) {
    std::vector<std::string> parts;
    for (const StageSpec& spec : cut)
        parts.push_back(spec.num_blocks() == 1 ? fmt::format("{}", spec.first_block)
                                               : fmt::format("{}-{}", spec.first_block, spec.end_block - 1));
    return fmt::format("blocks {}", fmt::join(parts, " | "));
}

}  // namespace nb

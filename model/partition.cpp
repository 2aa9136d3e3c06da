#include "model/partition.h"

#include <algorithm>
#include <charconv>
#include <limits>
#include <optional>
#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "model/flops.h"
#include "src/core/error.h"

namespace nb {

namespace {

StageSpec make_spec(int64_t first, int64_t end, int stage, int num_stages) {
    return {first, end, stage == 0, stage == num_stages - 1};
}

// --stages >= 1 is checked where the plan is (check_run_shape, src/plan/run_shape.h); here it is an invariant.
void check_stage_count_fits(const ModelConfig& config, int num_stages, const char* who) {
    if (num_stages <= 0) throw std::logic_error(fmt::format("{}: {} stages", who, num_stages));
    if (num_stages > config.num_layers)
        throw UsageError(fmt::format("{} pipeline stages but the model has only {} layers (each stage needs one)",
                                     num_stages, config.num_layers));
}

}  // namespace

PipelineCut parse_pipeline_cut(std::string_view name) { return kPipelineCuts.parse(name); }

std::string_view pipeline_cut_name(PipelineCut cut) { return kPipelineCuts.name(cut); }

std::string_view stage_bound_name(StageBound bound) {
    switch (bound) {
        case StageBound::cost: return "cost";
        case StageBound::memory: return "memory";
        case StageBound::params: return "params";
        case StageBound::layout: return "layout";
    }
    return "?";
}

std::vector<StageSpec> partition_model(const ModelConfig& config, int num_stages) {
    check_stage_count_fits(config, num_stages, "partition_model");
    const int64_t L = config.num_layers;
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

namespace {

// The FLOP model's forward + backward per token as a whole number: its counts are (2 x parameters of the matrix
// products, 4 x blocks x T x d, times 3), so the sums of a cut stay exact.
int64_t whole_flops(double flops) {
    const auto n = static_cast<int64_t>(flops);
    if (static_cast<double>(n) != flops || n < 0)
        throw std::logic_error(fmt::format("the FLOP model gave {} FLOPs, not a whole number", flops));
    return n;
}

// Each stage's forward + backward FLOPs per token: a prefix sum over the blocks, and the head on the last stage.
class StageCosts {
public:
    StageCosts(const ModelConfig& c, int64_t seq_len) : prefix_(static_cast<size_t>(c.num_layers) + 1, 0) {
        for (int64_t i = 0; i < c.num_layers; ++i)
            prefix_[static_cast<size_t>(i) + 1] =
                prefix_[static_cast<size_t>(i)] +
                whole_flops(stage_flops_per_token(c, {i, i + 1, false, false}, seq_len).training());
        const int64_t L = c.num_layers;
        head_ = whole_flops(stage_flops_per_token(c, {L, L, false, true}, seq_len).training());
    }
    int64_t operator()(bool last, int64_t first, int64_t end) const {
        return prefix_[static_cast<size_t>(end)] - prefix_[static_cast<size_t>(first)] + (last ? head_ : 0);
    }
    int64_t total() const { return prefix_.back() + head_; }

private:
    std::vector<int64_t> prefix_;
    int64_t head_ = 0;
};

// Which cuts reach a slowest stage of at most `limit` FLOPs with every stage fitting. can[s][j - s]: stages
// s..P-1 can hold blocks j..L-1 (j in [s, L - (P - s)]: every stage before and after keeps a block).
class CostSearch {
public:
    CostSearch(const StageCosts& costs, const StageFits& fits, int64_t L, int P)
        : costs_(costs), fits_(fits), L_(L), P_(P), can_(static_cast<size_t>(P)) {}

    bool valid(int s, int64_t first, int64_t end, int64_t limit) const {
        return costs_(s == P_ - 1, first, end) <= limit && (!fits_ || fits_(s, first, end));
    }

    // Fills can_ for `limit`, from the last stage back; true when the whole model can be cut so.
    bool feasible(int64_t limit) {
        const int last = P_ - 1;
        for (int s = last; s >= 0; --s) {
            const int64_t lo = s, hi = L_ - (P_ - s);  // stage s's first block
            std::vector<char>& can = can_[static_cast<size_t>(s)];
            can.assign(static_cast<size_t>(hi - lo + 1), 0);
            if (s == last) {
                for (int64_t j = lo; j <= hi; ++j) can[static_cast<size_t>(j - lo)] = valid(s, j, L_, limit);
                continue;
            }
            // next_start[e - (s + 1)]: the first e' >= e where stage s + 1 can start (or L_ + 1).
            const std::vector<char>& later = can_[static_cast<size_t>(s) + 1];
            const int64_t later_lo = s + 1, end_hi = L_ - (P_ - 1 - s);  // stage s's last possible end
            std::vector<int64_t> next_start(later.size() + 1, L_ + 1);
            for (int64_t e = end_hi; e >= later_lo; --e)
                next_start[static_cast<size_t>(e - later_lo)] =
                    later[static_cast<size_t>(e - later_lo)] ? e : next_start[static_cast<size_t>(e - later_lo) + 1];
            // The furthest end stage s may reach from j grows with j (a fitting range's sub-ranges fit, and a
            // range costs less for starting later): one pass moves it forward only.
            int64_t reach = lo;
            for (int64_t j = lo; j <= hi; ++j) {
                reach = std::max(reach, j);
                while (reach + 1 <= end_hi && valid(s, j, reach + 1, limit)) ++reach;
                can[static_cast<size_t>(j - lo)] =
                    reach > j && next_start[static_cast<size_t>(j + 1 - later_lo)] <= reach;
            }
        }
        return can_[0][0] != 0;
    }

    // After a feasible(limit) that held: the cut that gives each stage in turn the fewest blocks.
    std::vector<StageSpec> fewest_blocks_first(int64_t limit) const {
        std::vector<StageSpec> specs;
        int64_t first = 0;
        for (int s = 0; s + 1 < P_; ++s) {
            const std::vector<char>& later = can_[static_cast<size_t>(s) + 1];
            int64_t end = first + 1;
            while (!(valid(s, first, end, limit) && later[static_cast<size_t>(end - (s + 1))])) ++end;
            specs.push_back(make_spec(first, end, s, P_));
            first = end;
        }
        specs.push_back(make_spec(first, L_, P_ - 1, P_));
        return specs;
    }

    // The least slowest-stage cost a cut reaches (binary search: the costs are whole numbers), and that cut;
    // nothing when no cut fits.
    std::optional<std::vector<StageSpec>> best() {
        int64_t lo = 0, hi = costs_.total();
        if (!feasible(hi)) return std::nullopt;
        while (lo < hi) {
            const int64_t mid = lo + (hi - lo) / 2;
            if (feasible(mid)) hi = mid;
            else lo = mid + 1;
        }
        feasible(lo);
        return fewest_blocks_first(lo);
    }

private:
    const StageCosts& costs_;
    const StageFits& fits_;
    int64_t L_;
    int P_;
    std::vector<std::vector<char>> can_;
};

}  // namespace

StageCut partition_model_by_cost(const ModelConfig& config, int num_stages, int64_t seq_len,
                                 const StageFits& fits) {
    check_stage_count_fits(config, num_stages, "partition_model_by_cost");
    const int P = num_stages;
    if (P == 1) return {{make_spec(0, config.num_layers, 0, 1)}, {StageBound::cost}, true};
    const StageCosts costs(config, seq_len);
    const StageFits none;
    CostSearch blind_search(costs, none, config.num_layers, P);
    const std::vector<StageSpec> blind = *blind_search.best();  // with no memory bound some cut always exists
    StageCut cut{blind, std::vector<StageBound>(static_cast<size_t>(P), StageBound::cost), true};
    if (!fits) return cut;
    // The memory-blind optimum fits: it is also the best fitting cut, and the first among equals.
    bool all_fit = true;
    for (int s = 0; s < P; ++s) {
        const StageSpec& spec = blind[static_cast<size_t>(s)];
        if (!fits(s, spec.first_block, spec.end_block)) {
            cut.bounds[static_cast<size_t>(s)] = StageBound::memory;
            all_fit = false;
        }
    }
    if (all_fit) return cut;
    CostSearch search(costs, fits, config.num_layers, P);
    if (std::optional<std::vector<StageSpec>> fitting = search.best()) {
        cut.stages = std::move(*fitting);
        return cut;
    }
    return {blind, std::vector<StageBound>(static_cast<size_t>(P), StageBound::cost), false};
}

std::vector<int64_t> parse_pipeline_layout(std::string_view text) {
    std::vector<int64_t> blocks;
    size_t at = 0;
    for (int stage = 0;; ++stage) {
        const size_t comma = std::min(text.find(',', at), text.size());
        const std::string_view entry = text.substr(at, comma - at);
        int64_t n = -1;
        const auto [end, ec] = std::from_chars(entry.data(), entry.data() + entry.size(), n);
        if (ec != std::errc() || end != entry.data() + entry.size() || entry.empty() || n < 0)
            throw UsageError(fmt::format("--pipeline-layout '{}': '{}' (stage {}) is not a positive integer (blocks "
                                         "per stage, e.g. 3,4,4,2)",
                                         text, entry, stage));
        if (n == 0)
            throw UsageError(fmt::format("--pipeline-layout '{}': stage {} would be empty (every stage needs at "
                                         "least one block)",
                                         text, stage));
        blocks.push_back(n);
        if (comma == text.size()) return blocks;
        at = comma + 1;
    }
}

std::vector<StageSpec> partition_model_by_layout(const ModelConfig& config, int num_stages,
                                                 const std::vector<int64_t>& blocks_per_stage) {
    check_stage_count_fits(config, num_stages, "partition_model_by_layout");
    const std::string layout = fmt::format("{}", fmt::join(blocks_per_stage, ","));
    if (static_cast<int64_t>(blocks_per_stage.size()) != num_stages)
        throw UsageError(fmt::format("--pipeline-layout '{}' names {} stage{} but --stages is {}", layout,
                                     blocks_per_stage.size(), blocks_per_stage.size() == 1 ? "" : "s", num_stages));
    int64_t sum = 0;  // saturating: a sum past int64 is still "more than the layers"
    for (const int64_t n : blocks_per_stage) {
        if (n <= 0) throw std::logic_error(fmt::format("partition_model_by_layout: a stage of {} blocks", n));
        sum = n > std::numeric_limits<int64_t>::max() - sum ? std::numeric_limits<int64_t>::max() : sum + n;
    }
    if (sum != config.num_layers)
        throw UsageError(fmt::format("--pipeline-layout '{}' holds {} blocks but the model has {} layers", layout,
                                     sum, config.num_layers));
    std::vector<StageSpec> specs;
    int64_t first = 0;
    for (int s = 0; s < num_stages; ++s) {
        const int64_t end = first + blocks_per_stage[static_cast<size_t>(s)];
        specs.push_back(make_spec(first, end, s, num_stages));
        first = end;
    }
    return specs;
}

std::string pipeline_layout_of(const std::vector<StageSpec>& cut) {
    std::vector<int64_t> blocks;
    for (const StageSpec& spec : cut) blocks.push_back(spec.num_blocks());
    return fmt::format("{}", fmt::join(blocks, ","));
}

std::string describe_cut(const std::vector<StageSpec>& cut) {
    std::vector<std::string> parts;
    for (const StageSpec& spec : cut)
        parts.push_back(spec.num_blocks() == 1 ? fmt::format("{}", spec.first_block)
                                               : fmt::format("{}-{}", spec.first_block, spec.end_block - 1));
    return fmt::format("blocks {}", fmt::join(parts, " | "));
}

}  // namespace nb

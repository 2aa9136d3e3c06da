// balance_ranks (src/plan/rank_balance.h): with chunks per rank, the cut whose slowest rank (the sum of its parts'
// FLOPs) is least, then whose parts are most even, against a brute force over every cut written here apart (each
// part's FLOPs straight from the FLOP model), for the V of zb-v and the loop of interleaved 1F1B, with and without a
// memory bound; a search cut short is never worse than where it started; the head's rank gets the fewest blocks.
#include <doctest/doctest.h>

#include <algorithm>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "model/config.h"
#include "model/flops.h"
#include "model/partition.h"
#include "src/plan/rank_balance.h"
#include "tests/unit/test_util.h"

using namespace nb;
using namespace nb::test;

namespace {

StageSpec part_of(const std::vector<int64_t>& b, int j) {
    const int parts = static_cast<int>(b.size()) - 1;
    return {b[static_cast<size_t>(j)], b[static_cast<size_t>(j) + 1], j == 0, j == parts - 1};
}

// (the slowest rank's FLOPs, the sum of squares of the parts' FLOPs), parts added in order.
std::pair<double, double> score_of(const ModelConfig& c, int64_t seq, const StagePlacement& placement,
                                   const std::vector<int64_t>& b) {
    std::vector<double> ranks(static_cast<size_t>(placement.ranks), 0.0);
    double squares = 0;
    for (int j = 0; j < placement.parts(); ++j) {
        const double f = stage_flops_per_token(c, part_of(b, j), seq).training();
        ranks[static_cast<size_t>(placement.rank_of(j))] += f;
        squares += f * f;
    }
    double most = 0;
    for (double r : ranks) most = std::max(most, r);
    return {most, squares};
}

// The first cut in boundary order with the least score among those whose parts all fit.
std::optional<std::vector<int64_t>> brute_force(const ModelConfig& c, int64_t seq, const StagePlacement& placement,
                                                const StageFits& fits) {
    std::optional<std::vector<int64_t>> best;
    std::pair<double, double> best_score{std::numeric_limits<double>::infinity(), 0};
    for_each_cut(c.num_layers, placement.parts(), [&](const std::vector<int64_t>& b) {
        for (int j = 0; j < placement.parts(); ++j)
            if (fits && !fits(j, b[static_cast<size_t>(j)], b[static_cast<size_t>(j) + 1])) return;
        const auto s = score_of(c, seq, placement, b);
        if (s < best_score) best_score = s, best = b;
    });
    return best;
}

std::vector<int64_t> bounds_of(const std::vector<StageSpec>& cut) {
    std::vector<int64_t> b = {0};
    for (const StageSpec& s : cut) b.push_back(s.end_block);
    return b;
}

std::vector<ModelConfig> configs() {
    std::vector<ModelConfig> out;
    for (const char* preset : {"tiny", "tiny-moe", "smollm-135m"}) {
        ModelConfig c = model_preset(preset);
        c.tie_embeddings = false;
        out.push_back(c);
    }
    ModelConfig mixed = model_preset("tiny-moe");  // MoE blocks 1, 4 and 5 of 9
    mixed.num_layers = 9;
    mixed.moe_layers = "1,4,5";
    mixed.resolve_moe_layers();
    mixed.validate();
    out.push_back(mixed);
    ModelConfig narrow = model_preset("tiny");  // the head worth several blocks
    narrow.num_layers = 10;
    narrow.hidden_size = 32;
    narrow.ffn_hidden_size = 48;
    narrow.validate();
    out.push_back(narrow);
    return out;
}

}  // namespace

TEST_CASE("balance_ranks: the least slowest rank, then the most even parts (brute force over every cut)") {
    int cases = 0;
    for (const ModelConfig& c : configs())
        for (int P : {2, 3})
            for (PlacementShape shape : {PlacementShape::v, PlacementShape::loop})
                for (const int64_t seq : {int64_t{64}, int64_t{1024}}) {
                    const StagePlacement placement{P, 2, shape};
                    if (c.num_layers < placement.parts()) continue;
                    CAPTURE(c.preset);
                    CAPTURE(c.num_layers);
                    CAPTURE(P);
                    CAPTURE(static_cast<int>(shape));
                    CAPTURE(seq);
                    const std::vector<StageSpec> start = partition_model_by_cost(c, placement.parts(), seq).stages;
                    const std::vector<int64_t> got = bounds_of(balance_ranks(c, seq, placement, start, {}));
                    const std::optional<std::vector<int64_t>> want = brute_force(c, seq, placement, {});
                    REQUIRE(want);
                    CHECK(got == *want);
                    CHECK(score_of(c, seq, placement, got).first <= score_of(c, seq, placement, bounds_of(start)).first);
                    // Within a memory bound (a part's blocks, weighted as an earlier rank holds more in flight).
                    const StageFits fits = [&](int j, int64_t first, int64_t end) {
                        return (end - first) * (placement.ranks - placement.rank_of(j)) <= c.num_layers / 2;
                    };
                    const std::optional<std::vector<int64_t>> bound = brute_force(c, seq, placement, fits);
                    if (bound) {
                        const std::vector<StageSpec> fit_start = partition_model_by_cost(c, placement.parts(), seq, fits).stages;
                        CHECK(bounds_of(balance_ranks(c, seq, placement, fit_start, fits)) == *bound);
                    }
                    ++cases;
                }
    CHECK(cases > 20);
}

TEST_CASE("balance_ranks: cut short, the search returns no worse than its start; one chunk changes nothing") {
    ModelConfig c = model_preset("smollm-135m");
    c.tie_embeddings = false;
    const StagePlacement placement{4, 2, PlacementShape::v};
    const std::vector<StageSpec> start = partition_model_by_cost(c, 8, 256).stages;
    const std::vector<int64_t> short_search = bounds_of(balance_ranks(c, 256, placement, start, {}, 1));
    const std::vector<int64_t> full = bounds_of(balance_ranks(c, 256, placement, start, {}));
    CHECK(score_of(c, 256, placement, short_search) <= score_of(c, 256, placement, bounds_of(start)));
    CHECK(score_of(c, 256, placement, full) <= score_of(c, 256, placement, short_search));
    // zb-v puts the embedding (part 0) and the head (part 7) on rank 0: they get the fewest blocks.
    const std::vector<StageSpec> cut = balance_ranks(c, 256, placement, start, {});
    CHECK(cut.front().num_blocks() == 1);
    CHECK(cut.back().num_blocks() == 1);
    const std::vector<double> ranks = rank_flops(c, 256, placement, cut);
    const std::vector<double> before = rank_flops(c, 256, placement, start);
    CHECK(*std::max_element(ranks.begin(), ranks.end()) <= *std::max_element(before.begin(), before.end()));
    CHECK(score_of(c, 256, placement, bounds_of(cut)) < score_of(c, 256, placement, bounds_of(start)));
    const std::vector<StageSpec> one = partition_model_by_cost(c, 4, 256).stages;
    CHECK(bounds_of(balance_ranks(c, 256, {4, 1, PlacementShape::loop}, one, {})) == bounds_of(one));
    CHECK_THROWS_AS(balance_ranks(c, 256, placement, one, {}), std::invalid_argument);
}

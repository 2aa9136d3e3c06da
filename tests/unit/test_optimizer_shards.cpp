// The distributed optimizer's split of a stage's state (optim/optimizer_shards.h): elementwise state in D even
// shares; muon's hidden matrices and soap's matrices whole, each on one replica, largest first onto the least
// loaded; one replica holds everything.
#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "model/config.h"
#include "model/partition.h"
#include "model/stage_model.h"
#include "optim/optimizer_shards.h"
#include "optim/stage_optimizer.h"

using namespace nb;

namespace {

OptimizerConfig named(const char* name) {
    OptimizerConfig c;
    c.name = name;
    return c;
}

}  // namespace

TEST_CASE("optimizer shards: even for elementwise state, whole matrices for muon and soap, all of it on one") {
    const ModelConfig c = model_preset("small");
    const ParamLayout layout = StageModel(c, whole_model_spec(c)).layout();
    for (const char* name : {"adamw", "lion", "adan", "mars", "muon", "soap"})
        for (int d : {1, 2, 3, 8}) {
            CAPTURE(name);
            CAPTURE(d);
            const int64_t total = stage_optimizer_state_bytes(named(name), DelayFixConfig{}, layout);
            const std::vector<int64_t> shares = optimizer_shard_bytes(named(name), DelayFixConfig{}, layout, d);
            REQUIRE(shares.size() == static_cast<size_t>(d));
            const int64_t sum = std::accumulate(shares.begin(), shares.end(), int64_t{0});
            CHECK(sum >= total);
            CHECK(sum < total + d);  // only the even part's rounding up
            if (d == 1) CHECK(shares.front() == total);
            // The largest tensor kept whole bounds the spread (largest first onto the least loaded).
            int64_t largest_whole = 0;
            for (const ParamInfo& info : layout.params()) {
                if (!shards_whole_tensor(name, info)) continue;
                ParamLayout one;
                one.add(info);
                largest_whole = std::max(largest_whole, stage_optimizer_state_bytes(named(name), DelayFixConfig{}, one));
            }
            const auto [lo, hi] = std::minmax_element(shares.begin(), shares.end());
            CHECK(*hi - *lo <= largest_whole);
            if (largest_whole == 0) CHECK(*hi == (total + d - 1) / d);  // elementwise: even shares
        }
    CHECK(shards_whole_tensor("muon", layout[layout.index_of("layers.0.attn.wq")]));
    CHECK_FALSE(shards_whole_tensor("muon", layout[0]));  // the embedding: Muon's AdamW part, elementwise
    CHECK_FALSE(shards_whole_tensor("adamw", layout[layout.index_of("layers.0.attn.wq")]));
}

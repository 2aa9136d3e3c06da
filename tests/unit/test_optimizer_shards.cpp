// The distributed optimizer's split of a stage's state (optim/optimizer_shards.h): every tensor whole on one
// replica, largest state first onto the least loaded; the shares add up to the whole state and differ by at most
// the largest tensor's; one replica holds everything.
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

TEST_CASE("optimizer shards: whole tensors, balanced to within the largest, all of it on one") {
    const ModelConfig c = model_preset("small");
    const ParamLayout layout = StageModel(c, whole_model_spec(c)).layout();
    for (const char* name : {"adamw", "lion", "adan", "mars", "muon", "soap"})
        for (int d : {1, 2, 3, 8}) {
            CAPTURE(name);
            CAPTURE(d);
            const int64_t total = stage_optimizer_state_bytes(named(name), DelayFixConfig{}, layout);
            const std::vector<int64_t> shares = optimizer_shard_bytes(named(name), DelayFixConfig{}, layout, d);
            const std::vector<int> owners = optimizer_tensor_owners(named(name), DelayFixConfig{}, layout, d);
            REQUIRE(shares.size() == static_cast<size_t>(d));
            REQUIRE(owners.size() == static_cast<size_t>(layout.size()));
            CHECK(std::accumulate(shares.begin(), shares.end(), int64_t{0}) == total);
            int64_t largest = 0;
            size_t listed = 0;
            for (int r = 0; r < d; ++r) listed += owned_tensors(owners, r).size();
            CHECK(listed == owners.size());  // every tensor has exactly one owner
            for (int i = 0; i < layout.size(); ++i) {
                CHECK((owners[static_cast<size_t>(i)] >= 0 && owners[static_cast<size_t>(i)] < d));
                ParamLayout one;
                one.add(layout[i]);
                largest = std::max(largest, stage_optimizer_state_bytes(named(name), DelayFixConfig{}, one));
            }
            const auto [lo, hi] = std::minmax_element(shares.begin(), shares.end());
            CHECK(*hi - *lo <= largest);
            if (d == 1) CHECK(shares.front() == total);
            if (d > 1) CHECK(*lo > 0);  // small has more large tensors than 8 replicas
        }
}

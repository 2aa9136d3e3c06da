// The distributed optimizer's split of a stage's state (optim/optimizer_shards.h): elementwise state cut by rows in
// layout order, replica 0 first (each replica one run of rows of a tensor at most); muon's hidden matrices, soap's
// and mars's tensors whole, largest first onto the least loaded; every row owned once; the shares add up to the
// whole state and are even to within a row (elementwise) or the largest whole tensor; one replica holds all.
#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>
#include <set>
#include <utility>
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

int64_t tensor_state_bytes(const char* name, const ParamInfo& info) {
    ParamLayout one;
    one.add(info);
    return stage_optimizer_state_bytes(named(name), DelayFixConfig{}, one);
}

}  // namespace

TEST_CASE("optimizer shards: rows of elementwise state, whole matrices, every row once, even shares") {
    const ModelConfig c = model_preset("small");
    const ParamLayout layout = StageModel(c, whole_model_spec(c)).layout();
    for (const char* name : {"adamw", "lion", "adan", "mars", "muon", "soap"})
        for (int d : {1, 2, 3, 8}) {
            CAPTURE(name);
            CAPTURE(d);
            const int64_t total = stage_optimizer_state_bytes(named(name), DelayFixConfig{}, layout);
            const std::vector<int64_t> shares = optimizer_shard_bytes(named(name), DelayFixConfig{}, layout, d);
            const std::vector<TensorShard> shards = optimizer_shards(named(name), DelayFixConfig{}, layout, d);
            REQUIRE(shares.size() == static_cast<size_t>(d));
            CHECK(std::accumulate(shares.begin(), shares.end(), int64_t{0}) == total);
            // Every row of every tensor once, in order; a replica has one run of a tensor's rows at most.
            int tensor = -1;
            int64_t next_row = 0;
            std::set<std::pair<int, int>> runs;
            int64_t largest_whole = 0, largest_row = 0;
            for (const TensorShard& s : shards) {
                if (s.tensor != tensor) {
                    if (tensor >= 0) CHECK(next_row == layout[tensor].shape[0]);
                    CHECK(s.tensor == tensor + 1);
                    tensor = s.tensor, next_row = 0;
                }
                CHECK(s.row_begin == next_row);
                CHECK(s.row_end > s.row_begin);
                CHECK((s.owner >= 0 && s.owner < d));
                CHECK(runs.insert({s.tensor, s.owner}).second);
                next_row = s.row_end;
                const ParamInfo& info = layout[s.tensor];
                const int64_t bytes = tensor_state_bytes(name, info);
                if (shards_by_rows(named(name), info)) largest_row = std::max(largest_row, bytes / info.shape[0] + 1);
                else largest_whole = std::max(largest_whole, bytes);
            }
            CHECK(tensor == layout.size() - 1);
            size_t listed = 0;
            for (int r = 0; r < d; ++r) listed += owned_shards(shards, r).size();
            CHECK(listed == shards.size());
            const auto [lo, hi] = std::minmax_element(shares.begin(), shares.end());
            CHECK(*hi - *lo <= largest_whole + 2 * largest_row);
            if (largest_whole == 0) CHECK(*hi - *lo <= 2 * largest_row);  // elementwise: even to within a row
            if (d == 1) CHECK(shares.front() == total);
        }
    const ParamInfo& wq = layout[layout.index_of("layers.0.attn.wq")];
    CHECK_FALSE(shards_by_rows(named("muon"), wq));
    CHECK(shards_by_rows(named("muon"), layout[0]));  // the embedding: Muon's AdamW part, elementwise
    CHECK(shards_by_rows(named("adamw"), wq));
    CHECK_FALSE(shards_by_rows(named("mars"), layout[0]));  // the norm of c_t needs the whole tensor
    CHECK_FALSE(shards_by_rows(named("soap"), layout[0]));
}

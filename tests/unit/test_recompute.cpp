// Which layers full recomputation takes (model/recompute.h): Megatron's uniform groups and block count, per part;
// the embedding and the head never. The bits a recomputed run ends on: tests/cli/test_recompute.sh.
#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include "model/recompute.h"
#include "model/stage_model.h"

using namespace nb;

namespace {

std::vector<int64_t> groups_of(const StageSpec& spec, RecomputeGranularity g, RecomputeMethod m, int64_t n) {
    return recompute_groups(spec, RecomputeConfig{g, m, n});
}

}  // namespace

TEST_CASE("recompute_groups: none keeps everything; uniform groups every block; block takes the first N") {
    const StageSpec first{0, 5, true, false};  // layers: embedding, blocks 0-4
    const StageSpec last{5, 7, false, true};   // blocks 5-6, head
    using G = RecomputeGranularity;
    using M = RecomputeMethod;
    CHECK(groups_of(first, G::none, M::uniform, 2) == std::vector<int64_t>{-1, -1, -1, -1, -1, -1});
    CHECK(groups_of(first, G::full, M::uniform, 1) == std::vector<int64_t>{-1, 1, 2, 3, 4, 5});
    CHECK(groups_of(first, G::full, M::uniform, 2) == std::vector<int64_t>{-1, 1, 1, 3, 3, 5});
    CHECK(groups_of(first, G::full, M::uniform, 9) == std::vector<int64_t>{-1, 1, 1, 1, 1, 1});
    CHECK(groups_of(first, G::full, M::block, 2) == std::vector<int64_t>{-1, 1, 2, -1, -1, -1});
    CHECK(groups_of(last, G::full, M::uniform, 2) == std::vector<int64_t>{0, 0, -1});
    CHECK(groups_of(last, G::full, M::block, 1) == std::vector<int64_t>{0, -1, -1});
}

// ComputeTurns (pipeline/stage/compute_turns.h): a rank's chunks take their computes in the order of the rank's
// merged list, every chunk's own computes in its own order; out of turn is a logic_error.
#include <doctest/doctest.h>

#include <memory>
#include <stdexcept>
#include <vector>

#include "pipeline/schedule/action_stream.h"
#include "pipeline/schedule/schedule.h"
#include "pipeline/stage/compute_turns.h"

using namespace nb;

TEST_CASE("compute turns: the rank's merged order of computes, chunk by chunk as the list has them") {
    const ScheduleSpec spec{.kind = ScheduleKind::zb_v, .stages = 3, .microbatches = 5, .steps = 2};
    const std::vector<StagePlan> plans = build_schedule(spec);
    for (int r = 0; r < spec.stages; ++r) {
        CAPTURE(r);
        ComputeTurns turns(std::make_unique<ListedActions>(plans[static_cast<size_t>(r)]));
        int computes = 0;
        for (const Action& a : plans[static_cast<size_t>(r)]) {
            if (!uses_weights(a.type)) continue;
            REQUIRE(turns.is_turn(a.chunk));
            CHECK_FALSE(turns.is_turn(1 - a.chunk));
            CHECK(turns.next_chunk() == a.chunk);
            CHECK_THROWS_AS(turns.took(1 - a.chunk), std::logic_error);
            turns.took(a.chunk);
            ++computes;
        }
        CHECK(computes == 2 * 2 * 3 * 5);  // 2 chunks x 2 steps x (F, B, W) x 5 microbatches
        CHECK(turns.next_chunk() == -1);
        CHECK_FALSE(turns.is_turn(0));
        CHECK_THROWS_AS(turns.took(0), std::logic_error);
    }
}

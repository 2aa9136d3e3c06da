// StageState (pipeline/stage/stage_state.h): one constructor for every training loop, and one list of the state that
// carries from step to step, by canonical name.
#include <doctest/doctest.h>

#include <set>
#include <string>

#include "model/partition.h"
#include "pipeline/stage/stage_state.h"
#include "tests/unit/pipeline_test_util.h"

namespace nb {

TEST_CASE("stage state: every carried tensor once, by name, weights first, then the optimizer's and ef's") {
    test::TempDir dir;
    TrainOptions o = test::pipeline_run(test::write_corpus(dir), "2bw", 2, 2, 1, {3, 32, 48, 16});
    o.optimizer.name = "muon";
    o.delay_fix.kind = DelayFixKind::ef;
    for (const StageSpec& spec : partition_model(o.model, 2)) {
        StageState state(o, spec, Device::cpu);
        const ParamLayout& layout = state.model.layout();
        const auto named = state.state_tensors();
        const auto optimizer_state = state.optimizer.state_tensors();
        REQUIRE(named.size() == static_cast<size_t>(layout.size()) + optimizer_state.size());
        std::set<std::string> names;
        for (size_t i = 0; i < named.size(); ++i) {
            CHECK(names.insert(named[i].first).second);  // unique
            if (i < static_cast<size_t>(layout.size())) {
                CHECK(named[i].first == "weights." + layout[static_cast<int>(i)].name);
                CHECK(named[i].second == &state.master[static_cast<int>(i)]);
            } else {
                CHECK(named[i] == optimizer_state[i - static_cast<size_t>(layout.size())]);
            }
        }
        bool has_ef = false;  // the mitigation's buffer is state too
        for (const auto& [name, tensor] : optimizer_state) has_ef |= name.starts_with("ef_update.");
        CHECK(has_ef);
    }
}

}  // namespace nb

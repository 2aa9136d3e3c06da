// Shared by the checkpoint reader tests (test_checkpoint_fuzz.cpp, test_checkpoint_format1.cpp): a real
// checkpoint to read, written by a small 2-stage in-process pipeline run.
#pragma once

#include <string>

#include "pipeline/schedule/pipeline_setup.h"
#include "src/run/pipeline_driver.h"
#include "tests/unit/pipeline_test_util.h"

namespace nb::test {

// The options of a 2-stage run of `schedule` (3 microbatches, 2 or more `iterations`) on the tests' corpus in `dir`,
// run once, saving every 2 iterations into dir/ck: dir/ck/step_2 is a checkpoint.
inline TrainOptions run_saving_checkpoints(const TempDir& dir, const std::string& schedule, int64_t iterations) {
    TrainOptions o = pipeline_run(write_corpus(dir), schedule, 2, 3, iterations, {3, 32, 48, 16});
    o.save_dir = dir.file("ck");
    o.save_interval = 2;
    NullLog log;
    run_in_process(make_pipeline_setup(make_run_plan(o)), nullptr, log.f);
    return o;
}

}  // namespace nb::test

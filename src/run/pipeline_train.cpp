#include "src/core/mpi_env.h"
#include "src/run/pipeline_driver.h"

namespace nb {

std::optional<PipelineSummary> run_pipeline_training(const RunPlan& plan, std::FILE* log) {
    const int world = mpi_world_size();
    check_stages_match_ranks(plan.options, world);
    const PipelineSetup setup = make_pipeline_setup(plan);
#ifdef NOBUBBLE_HAVE_MPI
    if (world > 1) return run_over_mpi(setup, log);
#endif
    return run_in_process(setup, log);
}

}  // namespace nb

#include "src/core/error.h"
#include "src/core/mpi_env.h"
#include "src/core/stop_signal.h"
#include "src/run/pipeline_driver.h"

namespace nb {

namespace {

// The manifest is the same file for every rank, so its errors are too: rank 0 prints the one line, and every
// rank exits with the runtime error's code.
std::optional<ResumePoint> read_resume_point_on_every_rank(const RunPlan& plan, int world) {
    const TrainOptions& o = plan.options;
    if (o.load_path.empty()) return std::nullopt;
    try {
        return read_resume_point(o, plan.cut);
    } catch (const RuntimeError&) {
        if (world > 1 && mpi_world_rank() != 0) throw ReportedElsewhere(kExitRuntime, "reported by rank 0");
        throw;
    }
}

}  // namespace

void prepare_runner(StageRunner& runner, const PipelineSetup& setup, const ResumePoint* resume) {
    if (!setup.options.save_dir.empty()) install_stop_signal_handlers();
    if (!resume) return;
    const StageFiles files = read_stage_files(*resume, setup.cut.at(static_cast<size_t>(runner.stage())),
                                              setup.options.model.tie_embeddings);
    runner.restore(files.by_name, files.steps_taken, resume->saved.data, files.source);
}

std::optional<PipelineSummary> run_pipeline_training(const RunPlan& plan, std::FILE* log) {
    const int world = mpi_world_size();
    check_stages_match_ranks(plan.options, world);
    const std::optional<ResumePoint> resume = read_resume_point_on_every_rank(plan, world);
    const PipelineSetup setup = make_pipeline_setup(plan, resume ? resume->saved.step : 0);
    if (resume && (world <= 1 || mpi_world_rank() == 0))
        print_resumed(*resume, plan.schedule.virtual_stage_count(), log);  // the parts: what a checkpoint holds
    const ResumePoint* from = resume ? &*resume : nullptr;
#ifdef NOBUBBLE_HAVE_MPI
    if (world > 1) return run_over_mpi(setup, from, log);
#endif
    return run_in_process(setup, from, log);
}

}  // namespace nb

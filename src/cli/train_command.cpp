// `nobubble train`: flag names follow Megatron-LM where one exists (the flags: train_flags.cpp).
//
// One synchronous stage in one process is the plain loop of src/run/trainer.cpp; anything else (more stages, an
// asynchronous schedule, several MPI ranks) is the pipeline executor (src/run/pipeline_driver.h). Under mpirun
// each rank is one stage, and --stages defaults to the number of ranks.
#include <fmt/format.h>

#include "src/core/error.h"
#include "src/core/host_allocator.h"
#include "src/core/job_failure.h"
#include "src/core/mpi_env.h"
#include "src/run/checkpoint.h"
#include "src/run/cut_memory.h"
#include "src/run/pipeline_driver.h"
#include "src/cli/train_flags.h"

namespace nb::cli {

Command add_train_command(CLI::App& app) {
    auto* sub = app.add_subcommand("train", "Train a model");
    sub->add_option("--config", "TOML config file (keys are the flag names without dashes; flags override it)");
    auto flags = std::make_shared<TrainFlags>();
    add_train_flags(*sub, *flags);
    return {sub, [flags, sub] {
                TrainOptions o = resolve_train_flags(*flags);
                set_wait_limit_s(o.watchdog_s);  // the set-up's collectives wait no longer than the steps' receives
                set_host_memory_limit_bytes(static_cast<size_t>(flags->host_memory_limit_bytes));
                const int world = mpi_world_size();
                // Under mpirun without --stages, D pipelines of world / D stages: the shape checked before that
                // division (the same usage error as in one process, on every rank).
                o.set_shape(shape_for_world(o.shape(), sub->count("--stages") > 0, world));
                // Every rank alike: a bad one is the same UsageError; the cut's memory bound is every rank's least.
                const RunPlan plan = make_run_plan(o, run_memory_fits(o));
                if (!needs_pipeline(plan, world)) {
                    print_final_lines(stdout, {.run = run_training(plan, stdout)});
                    return 0;
                }
                if (std::optional<PipelineSummary> summary = run_pipeline_training(plan, stdout)) {
                    // On stage 0 only, as `nobubble reference` prints them.
                    print_final_lines(stdout, {summary->run, summary->peak_versions, summary->optimizer_sha256,
                                               activation_peaks(*summary)});
                }
                return 0;
            }};
}

}  // namespace nb::cli

// `nobubble reference`: the single-process oracle for the pipeline schedules (src/run/reference.h). It takes
// exactly the flags of `train` (train_flags.cpp), so that the same command line names the same run.
#include <fmt/format.h>

#include "src/run/checkpoint.h"
#include "src/run/cut_memory.h"
#include "src/run/reference.h"
#include "src/cli/train_flags.h"

namespace nb::cli {

Command add_reference_command(CLI::App& app) {
    auto* sub = app.add_subcommand(
        "reference", "Run a pipeline schedule in one process, as the oracle the pipeline must match bit for bit");
    sub->add_option("--config", "TOML config file (keys are the flag names without dashes; flags override it)");
    auto flags = std::make_shared<TrainFlags>();
    add_train_flags(*sub, *flags);
    return {sub, [flags] {
                const TrainOptions options = resolve_train_flags(*flags);
                // The cut train would run with: the same options, the same memory bound.
                const reference::ReferenceSummary s =
                    reference::run_reference(make_run_plan(options, run_memory_fits(options)), stdout);
                print_final_lines(stdout, {s.run, s.peak_versions, s.optimizer_sha256});
                return 0;
            }};
}

}  // namespace nb::cli

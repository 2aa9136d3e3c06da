// `nobubble train`: flag names follow Megatron-LM where one exists (the flags: train_flags.cpp).
#include "train_flags.h"

namespace nb::cli {

Command add_train_command(CLI::App& app) {
    auto* sub = app.add_subcommand("train", "Train a model");
    sub->add_option("--config", "TOML config file (keys are the flag names without dashes; flags override it)");
    auto flags = std::make_shared<TrainFlags>();
    add_train_flags(*sub, *flags);
    return {sub, [flags] {
                print_final_lines(run_training(resolve_train_flags(*flags), stdout));
                return 0;
            }};
}

}  // namespace nb::cli

// The flags of `nobubble train`, shared with `nobubble reference` (the single-process oracle takes exactly the
// same flags, so that a run of either is named by the same command line), and the lines both print at the end.
#pragma once

#include <string>

#include "src/cli/commands.h"
#include "src/plan/train_options.h"
#include "src/run/trainer.h"

namespace nb::cli {

struct TrainFlags {
    ModelFlags model;
    std::string device = "cpu";
    std::string clip_scope;  // empty: by schedule (global for gpipe / 1f1b, stage for 2bw / pipedream)
    TrainOptions options;
};

void add_train_flags(CLI::App& sub, TrainFlags& flags);

// The options the flags name: the model preset with its overrides, the device and the clip scope resolved.
TrainOptions resolve_train_flags(const TrainFlags& flags);

// "final val_loss X" (when validation ran) and "final weights sha256 HEX", on stdout.
void print_final_lines(const TrainSummary& summary);
// "final optimizer state sha256 HEX" (pipeline/state_hash.h), after them: `reference` and pipeline runs of `train`.
void print_optimizer_line(const std::string& optimizer_sha256);

}  // namespace nb::cli

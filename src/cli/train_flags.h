// The flags of `nobubble train`, shared with `nobubble reference` (the single-process oracle takes exactly the
// same flags, so that a run of either is named by the same command line).
#pragma once

#include <string>

#include "src/cli/commands.h"
#include "src/plan/train_options.h"
#include "src/run/trainer.h"

namespace nb::cli {

struct TrainFlags {
    ModelFlags model;
    std::string device = "cpu";
    // The flags that name a choice, as typed; resolve_train_flags turns them into the options' enums.
    std::string schedule = "1f1b";
    std::string clip_scope;  // empty: by schedule (clip_scope_of: global for gpipe / 1f1b, stage for 2bw / pipedream)
    std::string lr_decay_style = "cosine";
    std::string delay_fix = "none";
    std::string recompute_granularity = "none";
    std::string recompute_method = "uniform";
    std::string tokenizer;   // --tokenizer FILE as typed (empty: the one beside the shards, if any)
    std::string kill_during = "forward";  // test-only
    int64_t host_memory_limit_bytes = 0;  // test-only: --host-memory-limit (src/core/host_allocator.h)
    RunShape shape;          // --micro-batch-size, --num-microbatches, --seq-length, --stages, ...
    CutFlags cut;            // --pipeline-cut, --pipeline-layout
    bool lr_given = false;   // --lr has no default: a run without it is a usage error
    TrainOptions options;    // every other flag's value (the shape's fields in it are set from `shape`)
    const CLI::App* app = nullptr;  // the subcommand (whether --model was given: --init-from-hf checks it)
};

void add_train_flags(CLI::App& sub, TrainFlags& flags);

// The options the flags name: the model preset with its overrides (or --init-from-hf's folder: its config and
// weights), the names parsed into enums (UsageError naming the flag for an unknown one), the clip scope's default
// resolved. Not yet a plan (make_run_plan).
TrainOptions resolve_train_flags(const TrainFlags& flags);

}  // namespace nb::cli

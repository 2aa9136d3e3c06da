#include "src/plan/train_options.h"

#include <cmath>

#include <fmt/format.h>

#include "src/core/error.h"

namespace nb {

namespace {

void require_positive(int64_t value, const char* flag) {
    if (value <= 0) throw UsageError(fmt::format("{} must be positive, got {}", flag, value));
}

}  // namespace

void TrainOptions::validate() const {
    model.validate();
    if (data_path.empty()) throw UsageError("--data is required (a text file or llm.c shards *.bin)");
    require_positive(micro_batch_size, "--micro-batch-size");
    require_positive(num_microbatches, "--num-microbatches");
    require_positive(seq_length, "--seq-length");
    require_positive(train_iters, "--train-iters");
    require_positive(log_interval, "--log-interval");
    if (eval_interval < 0) throw UsageError(fmt::format("--eval-interval must be >= 0, got {}", eval_interval));
    if (eval_iters < 0) throw UsageError(fmt::format("--eval-iters must be >= 0, got {}", eval_iters));
    if (!(clip_grad >= 0) || !std::isfinite(clip_grad))
        throw UsageError(fmt::format("--clip-grad must be >= 0, got {}", clip_grad));
    if (!(val_fraction >= 0 && val_fraction < 1))
        throw UsageError(fmt::format("--val-fraction must be in [0, 1), got {}", val_fraction));
    lr.validate(train_iters);
    optimizer.validate();
    delay_fix.validate();
}

void TrainOptions::validate_counting_steps(bool one_step_per_microbatch) const {
    TrainOptions counted = *this;
    if (one_step_per_microbatch && train_iters > 0 && num_microbatches > 0)
        counted.train_iters = train_iters * num_microbatches;
    counted.validate();
}

void TrainOptions::validate_clip_scope_and_ties(bool asynchronous_schedule) const {
    if (clip_scope != "global" && clip_scope != "stage")
        throw UsageError(fmt::format("--clip-scope '{}' is not one of: global, stage", clip_scope));
    const char* wanted = asynchronous_schedule ? "stage" : "global";
    if (clip_scope != wanted)
        throw UsageError(fmt::format("--clip-scope {} does not fit --schedule {}: {} (--clip-scope {})", clip_scope,
                                     schedule,
                                     asynchronous_schedule ? "an asynchronous schedule clips each stage by its own norm"
                                                           : "a synchronous schedule clips by the global norm",
                                     wanted));
    if (model.tie_embeddings && stages > 1)
        throw UsageError("tied embeddings across stages are not built yet: use --untie-embeddings-and-output-weights");
}

void TrainOptions::validate_delay_mitigations(int64_t optimizer_steps) const {
    const bool two_bw = schedule == "2bw", asynchronous = two_bw || schedule == "pipedream";
    if (delay_fix.parsed() != DelayFixKind::none && !two_bw)
        throw UsageError(fmt::format(
            "--delay-fix {} applies to --schedule 2bw only, not {}: {}", delay_fix.kind, schedule,
            asynchronous ? "pipedream's delay differs per stage and no per-stage rule is defined yet"
                         : "a synchronous schedule has no stale gradient to correct"));
    if (sync_start < 0) throw UsageError(fmt::format("--sync-start must be >= 0, got {}", sync_start));
    if (sync_cooldown < 0) throw UsageError(fmt::format("--sync-cooldown must be >= 0, got {}", sync_cooldown));
    if ((sync_start > 0 || sync_cooldown > 0) && !asynchronous)
        throw UsageError(fmt::format("--sync-start/--sync-cooldown apply to 2bw and pipedream; --schedule {} is "
                                     "synchronous already",
                                     schedule));
    if (sync_start + sync_cooldown > optimizer_steps)
        throw UsageError(fmt::format("--sync-start {} + --sync-cooldown {} exceed the {} optimizer steps of the run{}",
                                     sync_start, sync_cooldown, optimizer_steps,
                                     schedule == "pipedream" ? " (pipedream: one step per microbatch)" : ""));
}

std::string TrainOptions::describe_update_rule() const {
    std::string rule = "--optimizer " + optimizer.name;
    if (delay_fix.kind != "none") rule += " --delay-fix " + delay_fix.kind;
    if (sync_start > 0) rule += fmt::format(" --sync-start {}", sync_start);
    if (sync_cooldown > 0) rule += fmt::format(" --sync-cooldown {}", sync_cooldown);
    return rule;
}

}  // namespace nb

#include "src/plan/run_plan.h"

#include <algorithm>

#include <cmath>

#include <fmt/format.h>

#include "src/core/error.h"
#include "src/data/token_files.h"
#include "src/plan/pipeline_cut.h"
#include "src/plan/run_shape.h"

namespace nb {

namespace {

// Each flag's own range. The LR schedule's iteration flags count optimizer steps.
void check_each_flag(const TrainOptions& o, int64_t optimizer_steps) {
    check_run_shape(o.shape());  // B, m, T, P, D, V: each count's range, written once (src/plan/run_shape.h)
    o.model.validate();
    if (o.data_path.empty()) throw UsageError("--data is required (a text file or llm.c shards *.bin)");
    if (o.distributed_optimizer && o.data_parallel_size == 1)
        throw UsageError("--use-distributed-optimizer shards the optimizer state over the replicas: give "
                         "--data-parallel-size D > 1");
    if (o.distributed_optimizer && o.delay_fix.predicts())
        throw UsageError(fmt::format("--delay-fix {} with --use-distributed-optimizer is not built yet: each replica "
                                     "predicts its whole stage, and an owner holds the last update of its own shard "
                                     "only",
                                     o.delay_fix.name()));
    if (o.global_batch_size != 0 && o.global_batch_size != o.microbatches_per_iter() * o.micro_batch_size)
        throw UsageError(fmt::format("--global-batch-size {} is not --data-parallel-size {} x --num-microbatches {} x "
                                     "--micro-batch-size {} = {}",
                                     o.global_batch_size, o.data_parallel_size, o.num_microbatches,
                                     o.micro_batch_size, o.microbatches_per_iter() * o.micro_batch_size));
    require_positive_flag(o.train_iters, "--train-iters");
    require_positive_flag(o.log_interval, "--log-interval");
    if (o.eval_interval < 0) throw UsageError(fmt::format("--eval-interval must be >= 0, got {}", o.eval_interval));
    if (o.eval_iters < 0) throw UsageError(fmt::format("--eval-iters must be >= 0, got {}", o.eval_iters));
    if (o.sample_interval < 0)
        throw UsageError(fmt::format("--sample-interval must be >= 0, got {}", o.sample_interval));
    if (o.sample_interval > 0 && o.sample_tokens <= 0)
        throw UsageError(fmt::format("--sample-tokens must be positive, got {}", o.sample_tokens));
    if (o.sample_interval > 0 && (o.stages > 1 || o.data_parallel_size > 1 || is_asynchronous(o.schedule)))
        throw UsageError("--sample-interval: samples are drawn where one process holds the whole model (--stages 1, "
                         "--data-parallel-size 1, a synchronous schedule); from a pipeline run, generate from its "
                         "checkpoints: nobubble generate --load DIR");
    if (!(o.clip_grad >= 0) || !std::isfinite(o.clip_grad))
        throw UsageError(fmt::format("--clip-grad must be >= 0, got {}", o.clip_grad));
    if (!(o.val_fraction >= 0 && o.val_fraction < 1))
        throw UsageError(fmt::format("--val-fraction must be in [0, 1), got {}", o.val_fraction));
    o.lr.validate(optimizer_steps);
    o.optimizer.validate();
    o.delay_fix.validate();
}

// The tokenizer (--tokenizer, or the one beside the shards) names ids the model must have: a larger model vocabulary
// is allowed (padded, as Megatron pads it to a multiple), a smaller one is not. Byte text needs none.
void check_tokenizer(const TrainOptions& o) {
    if (!o.tokenizer) return;
    const std::string& path = o.tokenizer->path;
    const std::string which = o.tokenizer_given ? fmt::format("--tokenizer {}", path)
                                                : fmt::format("the tokenizer {} beside the --data shards", path);
    if (token_format_of(o.data_path) == TokenFormat::text_bytes)
        throw UsageError(fmt::format("--tokenizer {} goes with llm.c shards (--data *.bin): --data '{}' is byte text, "
                                     "its tokens are its bytes",
                                     o.tokenizer->path, o.data_path));
    if (o.tokenizer->vocab_size > o.model.vocab_size)
        throw UsageError(fmt::format("{} has {} ids but the model's vocab_size is {}: set --vocab-size {}", which,
                                     o.tokenizer->vocab_size, o.model.vocab_size, o.tokenizer->vocab_size));
}

// docs/DESIGN.md section 2: synchronous schedules clip by the global norm, asynchronous ones each stage by its own.
void check_clip_scope(const TrainOptions& o) {
    const ClipScope wanted = clip_scope_of(o.schedule);
    if (o.clip_scope != wanted)
        throw UsageError(fmt::format("--clip-scope {} does not fit --schedule {}: {} (--clip-scope {})",
                                     clip_scope_name(o.clip_scope), schedule_kind_name(o.schedule),
                                     is_asynchronous(o.schedule)
                                         ? "an asynchronous schedule clips each stage by its own norm"
                                         : "a synchronous schedule clips by the global norm",
                                     clip_scope_name(wanted)));
}

// The mitigations act on 2bw's one-step delay; predict alone also on pipedream's p-1-s (it extrapolates that many
// updates); the synchronous steps exist only in asynchronous schedules.
void check_delay_mitigations(const TrainOptions& o) {
    const std::string_view schedule = schedule_kind_name(o.schedule);
    const bool predict_alone = o.delay_fix.predict && o.delay_fix.kind == DelayFixKind::none;
    if (o.delay_fix.any() && o.schedule == ScheduleKind::pipedream && !predict_alone)
        throw UsageError(fmt::format("--delay-fix {} applies to --schedule 2bw only; pipedream takes predict alone: "
                                     "its delay differs per stage and ef, taylor and lookahead are one-step rules",
                                     o.delay_fix.name()));
    if (o.delay_fix.any() && !is_asynchronous(o.schedule))
        throw UsageError(fmt::format("--delay-fix {} applies to --schedule 2bw and pipedream, not {}: a synchronous "
                                     "schedule has no stale gradient to correct",
                                     o.delay_fix.name(), schedule));
    if ((o.sync_start > 0 || o.sync_cooldown > 0) && !is_asynchronous(o.schedule))
        throw UsageError(fmt::format("--sync-start/--sync-cooldown apply to 2bw and pipedream; --schedule {} is "
                                     "synchronous already",
                                     schedule));
}

// The ranks the test-only --*-rank flags may name: replica x P + stage (src/plan/rank_layout.h).
int job_ranks(const TrainOptions& o) { return o.stages * o.data_parallel_size; }
std::string describe_job_ranks(const TrainOptions& o) {
    if (o.data_parallel_size == 1) return fmt::format("{} stages", o.stages);
    return fmt::format("{} stages x {} replicas", o.stages, o.data_parallel_size);
}

void check_checkpoint_flags(const TrainOptions& o) {
    const int ranks = job_ranks(o);
    const std::string describe_ranks = describe_job_ranks(o);
    if (o.save_interval < 0) throw UsageError(fmt::format("--save-interval must be >= 0, got {}", o.save_interval));
    if (o.save_keep < 0) throw UsageError(fmt::format("--save-keep must be >= 0, got {}", o.save_keep));
    if (o.exit_interval < 0) throw UsageError(fmt::format("--exit-interval must be >= 0, got {}", o.exit_interval));
    if (!o.save_dir.empty() && o.save_interval == 0)
        throw UsageError("--save needs --save-interval N (a checkpoint after every N optimizer steps)");
    if (o.save_dir.empty() && (o.save_interval > 0 || o.save_keep > 0))
        throw UsageError("--save-interval and --save-keep go with --save DIR");
    if (o.allow_data_change && o.load_path.empty()) throw UsageError("--allow-data-change goes with --load DIR");
    if (o.signal_at_step >= 0 && o.save_dir.empty())
        throw UsageError("--signal-at-step needs --save DIR (a stop signal saves a checkpoint there)");
    if (o.signal_rank < 0 || o.signal_rank >= ranks)
        throw UsageError(fmt::format("--signal-rank {} is not a rank of {}", o.signal_rank, describe_ranks));
}

void check_fault_flags(const TrainOptions& o) {
    const int ranks = job_ranks(o);
    const std::string describe_ranks = describe_job_ranks(o);
    if ((o.fail_at_step >= 0) != (o.fail_rank >= 0))
        throw UsageError("--fail-at-step and --fail-rank go together (test-only fault injection)");
    if (o.fail_rank >= ranks)
        throw UsageError(fmt::format("--fail-rank {} is not a rank of {}", o.fail_rank, describe_ranks));
    if ((o.kill_at_step >= 0) != (o.kill_rank >= 0))
        throw UsageError("--kill-at-step and --kill-rank go together (test-only fault injection)");
    if (o.kill_rank >= ranks)
        throw UsageError(fmt::format("--kill-rank {} is not a rank of {}", o.kill_rank, describe_ranks));
    if ((o.stall_at_step >= 0) != (o.stall_rank >= 0))
        throw UsageError("--stall-at-step and --stall-rank go together (test-only stall injection)");
    if (o.stall_rank >= ranks)
        throw UsageError(fmt::format("--stall-rank {} is not a rank of {}", o.stall_rank, describe_ranks));
}

// The run counts its microbatches, samples and tokens in int64 (a microbatch's index is iteration x m + i; the data's
// position is counted in samples, and tokens per second in tokens): --train-iters x --num-microbatches x
// --data-parallel-size x --micro-batch-size x --seq-length must fit, or the counts would wrap. The run's length
// costs nothing else (docs/DESIGN.md section 1), so this is the one bound on --train-iters.
void check_run_length(const TrainOptions& o) {
    int64_t tokens = o.train_iters;
    for (int64_t factor : {int64_t{o.num_microbatches}, int64_t{o.data_parallel_size}, int64_t{o.micro_batch_size},
                           int64_t{o.seq_length}})
        if (factor > 0 && __builtin_mul_overflow(tokens, factor, &tokens))
            throw UsageError(fmt::format(
                "--train-iters {} is more than a run can count: x --num-microbatches {} x --data-parallel-size {} x "
                "--micro-batch-size {} x --seq-length {} tokens exceed 2^63 - 1",
                o.train_iters, o.num_microbatches, o.data_parallel_size, o.micro_batch_size, o.seq_length));
}

// model/recompute.h. On CUDA the rerun is the same code, but no GPU has yet shown that it gives the kept run's bits.
void check_recompute(const TrainOptions& o) {
    if (o.recompute.num_layers < 1)
        throw UsageError(fmt::format("--recompute-num-layers must be >= 1, got {}", o.recompute.num_layers));
    if (o.recompute.granularity != RecomputeGranularity::none && o.device == Device::cuda)
        throw UsageError(fmt::format("--recompute-granularity {} is built for --device cpu only: on --device cuda its "
                                     "bits are not yet checked against the kept run's",
                                     recompute_granularity_name(o.recompute.granularity)));
}

void check_watchdog(const TrainOptions& o) {
    if (!(o.watchdog_s >= 0) || !std::isfinite(o.watchdog_s))
        throw UsageError(fmt::format("--watchdog-s must be a number of seconds >= 0 (0: off), got {}", o.watchdog_s));
}

}  // namespace

RunPlan make_run_plan(const TrainOptions& o, const StageFits& fits) {
    RunPlan plan{o, o.schedule_spec(), {}};
    check_run_length(o);  // before anything multiplies the counts
    const bool counts_ok = o.train_iters > 0 && o.num_microbatches > 0;
    check_each_flag(o, counts_ok ? plan.optimizer_steps() : o.train_iters);
    check_tokenizer(o);
    plan.schedule.validate();  // 2bw with m < P; the synchronous steps' counts
    check_clip_scope(o);
    check_delay_mitigations(o);
    check_checkpoint_flags(o);
    check_fault_flags(o);
    check_watchdog(o);
    check_recompute(o);
    plan.cut = choose_pipeline_cut(o, fits).stages;  // more stages than layers; a layout that does not match
    return plan;
}

int64_t end_iteration(const TrainOptions& o, int64_t first) {
    if (o.exit_interval <= 0) return o.train_iters;
    return std::min(o.train_iters, (first / o.exit_interval + 1) * o.exit_interval);
}

bool checkpoint_due(const TrainOptions& o, int64_t done, int64_t end) {
    if (o.save_dir.empty()) return false;
    return done % o.save_interval == 0 || done == o.train_iters || done == end;
}

}  // namespace nb

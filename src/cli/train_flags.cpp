#include "src/cli/train_flags.h"

#include <string>
#include <type_traits>
#include <variant>

#include <fmt/format.h>

#include "optim/optimizer_registry.h"
#include "src/cli/init_from_hf.h"
#include "src/core/error.h"
#include "src/data/tokenizer_file.h"
#include "src/run/backend.h"

namespace nb::cli {

namespace {

// --optimizer and every optimizer hyperparameter, from the registry. A flag's value, when given, lands in its
// optional (unset: the optimizer's published default; validated when the optimizer is built).
void add_optimizer_flags(CLI::App& sub, OptimizerConfig& c) {
    sub.add_option("--optimizer", c.name, optimizer_choices())->capture_default_str();
    for (const OptimizerFlag& flag : optimizer_flags())
        std::visit(
            [&](auto field) {
                using T = typename std::remove_reference_t<decltype(c.*field)>::value_type;
                sub.add_option_function<T>(
                    std::string(flag.name), [&c, field](const T& value) { c.*field = value; },
                    optimizer_flag_help(flag));
            },
            flag.field);
}

}  // namespace

void add_train_flags(CLI::App& sub, TrainFlags& f) {
    TrainOptions& o = f.options;
    f.app = &sub;
    add_model_flags(sub, f.model);
    sub.add_option("--init-from-hf", o.init_from_hf,
                   "Start from a Hugging Face Llama folder (config.json, single or sharded safetensors; f32, bf16 or "
                   "f16): its shape and weights, a fresh optimizer");
    sub.add_option("--pretrained-checkpoint", o.pretrained_checkpoint,
                   "Start from a checkpoint's weights only (its newest master weights; step 0, a fresh optimizer, the "
                   "data from the start), as Megatron's; the model flags give its shape");
    sub.add_option("--device", f.device, kDevices.choices_text())
        ->capture_default_str();
    sub.add_option("--data", o.data_path, "Training data: a text file (bytes, vocab 256) or llm.c shards *.bin (glob)");
    sub.add_option("--val-data", o.val_data_path, "Validation data (same formats); default: hold back --val-fraction");
    sub.add_option("--tokenizer", f.tokenizer,
                   "The tokenizer.json that made --data's ids (default: the one beside llm.c shards, if there); "
                   "checkpoints record it and keep a copy, export writes it for AutoTokenizer");
    sub.add_option("--val-fraction", o.val_fraction, "Fraction of --data windows held back for validation")
        ->capture_default_str();
    add_shape_flags(sub, f.shape,
                    {{ShapeFlag::micro_batch_size},
                     {ShapeFlag::num_microbatches, "gradient accumulation"},
                     {ShapeFlag::seq_length},
                     {ShapeFlag::data_parallel_size, "a global batch of D x --num-microbatches microbatches, replica r "
                                                     "taking the r-th m of them; under mpirun -np P*D, rank = replica "
                                                     "x P + stage"}});
    sub.add_flag("--use-distributed-optimizer", o.distributed_optimizer,
                 "With D > 1: each replica keeps and updates the optimizer state of the tensors it owns and sends "
                 "their weights to the others (Megatron's ZeRO-1; the same bits)");
    sub.add_option("--global-batch-size", o.global_batch_size,
                   "Sequences per iteration, checked against D x --num-microbatches x --micro-batch-size (Megatron's)");
    sub.add_option("--train-iters", o.train_iters,
                   "Iterations of --num-microbatches microbatches (an optimizer step each; pipedream: one per "
                   "microbatch)")
        ->capture_default_str();
    sub.add_option_function<double>(
        "--lr", [&f](double lr) {
            f.options.lr.lr = lr;
            f.lr_given = true;
        },
        "Peak learning rate (required)");
    sub.add_option("--min-lr", o.lr.min_lr, "Learning rate at the end of decay")->capture_default_str();
    sub.add_option("--lr-warmup-iters", o.lr.warmup_iters, "Linear warm-up steps")->capture_default_str();
    sub.add_option("--lr-decay-style", f.lr_decay_style, kLrDecayStyles.choices_text())->capture_default_str();
    sub.add_option("--lr-decay-iters", o.lr.decay_iters, "Steps over which to decay (default: all steps)");
    sub.add_option("--lr-wsd-decay-iters", o.lr.wsd_decay_iters, "Final decay steps of WSD (default: 20%)");
    add_optimizer_flags(sub, o.optimizer);
    sub.add_option("--delay-fix", f.delay_fix,
                   kDelayFixKinds.choices_text() + ", or a comma list; 2bw (pipedream: predict)")
        ->capture_default_str();
    sub.add_option("--taylor-lambda", o.delay_fix.taylor_lambda, "taylor: lambda of g + lambda g*g*(W - W_stale)")
        ->capture_default_str();
    sub.add_option("--predict-lambda", o.delay_fix.predict_lambda, "predict: lambda of W_hat = W - lambda u_last")
        ->capture_default_str();
    sub.add_option("--lookahead-gamma", o.delay_fix.lookahead_gamma,
                   "lookahead: gamma of d = gamma d + (1 - gamma) u, forwards at W - gamma d")
        ->capture_default_str();
    sub.add_option("--sync-start", o.sync_start, "2bw/pipedream: run the first K optimizer steps synchronously")
        ->capture_default_str();
    sub.add_option("--sync-cooldown", o.sync_cooldown, "2bw/pipedream: run the last K optimizer steps synchronously")
        ->capture_default_str();
    sub.add_option("--clip-grad", o.clip_grad, "Gradient-norm clipping (0: off)")->capture_default_str();
    sub.add_option("--clip-scope", f.clip_scope,
                   kClipScopes.choices_text() + "; default: global for gpipe/1f1b, stage for 2bw/pipedream");
    sub.add_option("--recompute-granularity", f.recompute_granularity,
                   "Activation recomputation: " + kRecomputeGranularities.choices_text())
        ->capture_default_str();
    sub.add_option("--recompute-method", f.recompute_method,
                   "With full: " + kRecomputeMethods.choices_text())
        ->capture_default_str();
    sub.add_option("--recompute-num-layers", o.recompute.num_layers,
                   "With full: the blocks per group (uniform) or recomputed per stage part (block)")
        ->capture_default_str();
    sub.add_option("--schedule", f.schedule, "Pipeline schedule: " + kScheduleKinds.choices_text())->capture_default_str();
    add_shape_flags(sub, f.shape,
                    {{ShapeFlag::stages, "under mpirun, where not given, the ranks / --data-parallel-size"},
                     {ShapeFlag::virtual_stages, "with 1f1b and V > 1, interleaved 1F1B: the model cut into P x V "
                                                 "parts, chunk c of stage s holding part c P + s"}});
    add_cut_flags(sub, f.cut);
    add_seed_flag(sub, o.seed, "Seed for weights and data order");
    sub.add_option("--eval-interval", o.eval_interval, "Validate every N iterations (0: only at the end)")
        ->capture_default_str();
    sub.add_option("--eval-iters", o.eval_iters, "Validation iterations (each num-microbatches microbatches)")
        ->capture_default_str();
    sub.add_option("--sample-interval", o.sample_interval,
                   "Every N iterations, after evaluation, print a sample of the model's text and add it to --metrics "
                   "(0: never; one process only)")
        ->capture_default_str();
    sub.add_option("--sample-prompt", o.sample_prompt,
                   "The text a sample continues (default: from <|endoftext|>, or a newline for a byte model)");
    sub.add_option("--sample-tokens", o.sample_tokens, "Tokens per sample (sampled at temperature 1, seeded by --seed)")
        ->capture_default_str();
    sub.add_option("--log-interval", o.log_interval, "Print a progress line every N iterations")->capture_default_str();
    sub.add_option("--metrics", o.metrics_path, "Append one JSON object per iteration to this file");
    sub.add_option("--save", o.save_dir,
                   "Write checkpoints to DIR/step_<t>/; SIGTERM, SIGINT or SIGUSR1 then saves at a step every stage "
                   "agrees on and exits 0");
    sub.add_option("--save-interval", o.save_interval,
                   "With --save: a checkpoint after every N iterations (optimizer steps; pipedream: N*m) and the last");
    sub.add_option("--save-keep", o.save_keep, "With --save: keep only the K newest complete checkpoints (0: all)")
        ->capture_default_str();
    sub.add_option("--load", o.load_path, "Resume from DIR's newest complete checkpoint, or from DIR/step_<t>");
    sub.add_flag("--allow-data-change", o.allow_data_change,
                 "With --load: resume even where --data or --val-data differs from the checkpoint's (its files' sizes "
                 "and fingerprints); the log says so");
    sub.add_option("--exit-interval", o.exit_interval,
                   "Stop after the optimizer step that is a multiple of N (saving first with --save), as Megatron");
    sub.add_option("--trace", o.trace_path,
                   "Write a Chrome/Perfetto trace (JSON) of every stage's forwards, backwards, sends, receives, "
                   "waits and optimizer steps (train only; runs the pipeline executor)");
    sub.add_flag("--stop-on-nan,!--no-stop-on-nan", o.stop_on_nan,
                 "End the run with an error when the loss is not finite (default on)")
        ->capture_default_str();
    // Test-only: the pipeline's fault tests make one rank fail mid-run to check that the whole job ends.
    sub.add_option("--fail-at-step", o.fail_at_step,
                   "TEST ONLY: with --fail-rank, that rank raises an error as optimizer step N (from 0) begins");
    sub.add_option("--fail-rank", o.fail_rank, "TEST ONLY: the rank (replica x P + stage) that --fail-at-step fails");
    sub.add_option("--signal-at-step", o.signal_at_step,
                   "TEST ONLY: rank --signal-rank acts as if a SIGTERM arrived as optimizer step N (from 0) begins");
    sub.add_option("--signal-rank", o.signal_rank, "TEST ONLY: the rank (replica x P + stage) of --signal-at-step")
        ->capture_default_str();
    // Test-only: the watchdog's tests make one rank hang mid-run to check that the others end the job.
    sub.add_option("--stall-at-step", o.stall_at_step,
                   "TEST ONLY: with --stall-rank, that rank sleeps forever as optimizer step N (from 0) begins");
    sub.add_option("--stall-rank", o.stall_rank, "TEST ONLY: the rank (replica x P + stage) that --stall-at-step stalls");
    sub.add_option("--kill-at-step", o.kill_at_step,
                   "TEST ONLY: with --kill-rank, that rank kills itself (SIGKILL) in optimizer step N (from 0)");
    sub.add_option("--kill-rank", o.kill_rank, "TEST ONLY: the rank (replica x P + stage) that --kill-at-step kills");
    sub.add_option("--kill-during", f.kill_during, "TEST ONLY: where --kill-at-step kills: " + kKillPoints.choices_text())
        ->capture_default_str();
    sub.add_option("--host-memory-limit", f.host_memory_limit_bytes,
                   "TEST ONLY: host tensor allocations fail (std::bad_alloc) past N bytes in all, as on a full machine")
        ->check(CLI::NonNegativeNumber);
    sub.add_option("--watchdog-s", o.watchdog_s,
                   "Under mpirun: a rank whose stage makes no progress for S seconds names what it waits for and "
                   "ends the job (0: off; in one process a deadlock is found without it)")
        ->capture_default_str();
}

TrainOptions resolve_train_flags(const TrainFlags& f) {
    // Checked here, not by the value's range check, which would name a value the user never typed.
    if (!f.lr_given) throw UsageError("--lr is required (the peak learning rate, e.g. --lr 3e-4)");
    TrainOptions o = f.options;
    if (o.init_from_hf.empty())
        o.model = resolve_model(f.model);
    else
        apply_init_from_hf(f.model, f.app && f.app->count("--model") > 0, o);
    apply_pretrained_checkpoint(o);
    o.set_shape(f.shape);
    o.device = parse_device(f.device);
    o.schedule = parse_schedule_kind(f.schedule);
    o.clip_scope = f.clip_scope.empty() ? clip_scope_of(o.schedule) : parse_clip_scope(f.clip_scope);
    o.lr.decay_style = parse_lr_decay_style(f.lr_decay_style);
    o.delay_fix = parse_delay_fixes(f.delay_fix, o.delay_fix);
    o.recompute.granularity = parse_recompute_granularity(f.recompute_granularity);
    o.recompute.method = parse_recompute_method(f.recompute_method);
    o.kill_during = parse_kill_point(f.kill_during);
    o.tokenizer = tokenizer_of_data(f.tokenizer, o.data_path);
    o.tokenizer_given = !f.tokenizer.empty();
    resolve_cut_flags(f.cut, o);
    return o;
}

}  // namespace nb::cli

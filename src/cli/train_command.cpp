// `nobubble train`: flag names follow Megatron-LM where one exists.
#include <fmt/format.h>

#include "commands.h"
#include "trainer.h"

namespace nb::cli {

namespace {

struct TrainFlags {
    ModelFlags model;
    TrainOptions options;
};

void add_flags(CLI::App& sub, TrainFlags& f) {
    TrainOptions& o = f.options;
    add_model_flags(sub, f.model);
    sub.add_option("--data", o.data_path, "Training data: a text file (bytes, vocab 256) or llm.c shards *.bin (glob)");
    sub.add_option("--val-data", o.val_data_path, "Validation data (same formats); default: hold back --val-fraction");
    sub.add_option("--val-fraction", o.val_fraction, "Fraction of --data windows held back for validation")
        ->capture_default_str();
    sub.add_option("--micro-batch-size", o.micro_batch_size, "Sequences per microbatch")->capture_default_str();
    sub.add_option("--num-microbatches", o.num_microbatches, "Microbatches per iteration (gradient accumulation)")
        ->capture_default_str();
    sub.add_option("--seq-length", o.seq_length, "Tokens per sequence")->capture_default_str();
    sub.add_option("--train-iters", o.train_iters, "Optimizer steps")->capture_default_str();
    sub.add_option("--lr", o.lr.lr, "Peak learning rate (required)");
    sub.add_option("--min-lr", o.lr.min_lr, "Learning rate at the end of decay")->capture_default_str();
    sub.add_option("--lr-warmup-iters", o.lr.warmup_iters, "Linear warm-up steps")->capture_default_str();
    sub.add_option("--lr-decay-style", o.lr.decay_style, "constant, linear, cosine or wsd")->capture_default_str();
    sub.add_option("--lr-decay-iters", o.lr.decay_iters, "Steps over which to decay (default: --train-iters)");
    sub.add_option("--lr-wsd-decay-iters", o.lr.wsd_decay_iters, "Final decay steps of WSD (default: 20%)");
    sub.add_option("--adam-beta1", o.adamw.beta1, "AdamW beta1")->capture_default_str();
    sub.add_option("--adam-beta2", o.adamw.beta2, "AdamW beta2")->capture_default_str();
    sub.add_option("--adam-eps", o.adamw.eps, "AdamW epsilon")->capture_default_str();
    sub.add_option("--weight-decay", o.adamw.weight_decay, "Decoupled weight decay (not on norm gains)")
        ->capture_default_str();
    sub.add_option("--clip-grad", o.clip_grad, "Global gradient-norm clipping (0: off)")->capture_default_str();
    sub.add_option("--seed", o.seed, "Seed for weights and data order")->capture_default_str();
    sub.add_option("--eval-interval", o.eval_interval, "Validate every N steps (0: only at the end)")
        ->capture_default_str();
    sub.add_option("--eval-iters", o.eval_iters, "Validation iterations (each num-microbatches microbatches)")
        ->capture_default_str();
    sub.add_option("--log-interval", o.log_interval, "Print a progress line every N steps")->capture_default_str();
    sub.add_option("--metrics", o.metrics_path, "Append one JSON object per step to this file");
}

}  // namespace

Command add_train_command(CLI::App& app) {
    auto* sub = app.add_subcommand("train", "Train a model");
    sub->add_option("--config", "TOML config file (keys are the flag names without dashes; flags override it)");
    auto flags = std::make_shared<TrainFlags>();
    add_flags(*sub, *flags);
    return {sub, [flags] {
                flags->options.model = resolve_model(flags->model);
                TrainSummary s = run_training(flags->options, stdout);
                if (s.final_val_loss >= 0) fmt::print("final val_loss {:.4f}\n", s.final_val_loss);
                fmt::print("final weights sha256 {}\n", s.weights_sha256);
                return 0;
            }};
}

}  // namespace nb::cli

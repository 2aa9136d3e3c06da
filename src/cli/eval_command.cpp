// `nobubble eval`: a model's mean loss (nats per token) and perplexity over the validation windows `train` validates
// on (src/run/model_eval.h), from a checkpoint (--load) or a Hugging Face folder (--hf). One process: under mpirun
// with more than one rank it is a usage error (the whole model is evaluated on one rank; nothing is split).
#include <cmath>

#include <fmt/format.h>

#include "src/cli/commands.h"
#include "src/cli/model_source.h"
#include "src/core/error.h"
#include "src/run/backend.h"
#include "src/run/model_eval.h"

namespace nb::cli {

namespace {

struct EvalFlags {
    std::string load, hf, device = "cpu", dump_logits;
    RunShape shape;
    TrainOptions options;  // data, --val-fraction, --eval-iters
};

int run_eval(const EvalFlags& f, const CLI::App& sub) {
    const ModelSource m = read_model_source("eval", f.load, f.hf);
    TrainOptions o = f.options;
    o.model = m.config.model;
    RunShape shape = f.shape;
    if (m.seq_length > 0 && sub.count("--seq-length") == 0) shape.seq_length = m.seq_length;
    o.set_shape(shape);
    o.device = parse_device(f.device);
    check_run_shape(o.shape());
    if (o.eval_iters <= 0) throw UsageError(fmt::format("--eval-iters must be positive, got {}", o.eval_iters));
    const EvalResult r = evaluate_model(o, m.weights, m.name, f.dump_logits);
    fmt::print("eval: {} on {} microbatches of {} x {} tokens ({} tokens)\n", m.name, r.microbatches,
               o.micro_batch_size, o.seq_length, r.tokens);
    fmt::print("eval loss {} nats/token (val_loss {:.4f}), perplexity {:.4f}\n", r.loss, r.loss, std::exp(r.loss));
    return 0;
}

}  // namespace

Command add_eval_command(CLI::App& app) {
    auto* sub = app.add_subcommand("eval", "Mean loss (nats/token) and perplexity of a checkpoint or a Hugging Face "
                                           "folder over the validation windows train validates on");
    auto flags = std::make_shared<EvalFlags>();
    TrainOptions& o = flags->options;
    sub->add_option("--load", flags->load, "A checkpoint: DIR (its newest complete one) or DIR/step_<t>");
    sub->add_option("--hf", flags->hf, "A Hugging Face LlamaForCausalLM folder (config.json, safetensors)");
    sub->add_option("--device", flags->device, kDevices.choices_text())->capture_default_str();
    sub->add_option("--data", o.data_path, "Data: a text file (bytes, vocab 256) or llm.c shards *.bin (glob)")
        ->required();
    sub->add_option("--val-data", o.val_data_path, "Validation data (same formats); default: --val-fraction of --data");
    sub->add_option("--val-fraction", o.val_fraction, "Fraction of --data windows that are validation (as train)")
        ->capture_default_str();
    add_shape_flags(*sub, flags->shape,
                    {{ShapeFlag::micro_batch_size},
                     {ShapeFlag::num_microbatches, "per evaluation iteration, as train's"},
                     {ShapeFlag::seq_length, "default with --load: the checkpoint's"},
                     {ShapeFlag::data_parallel_size, "as train's: an evaluation iteration reads D x m microbatches"}});
    sub->add_option("--eval-iters", o.eval_iters, "Evaluation iterations (each D x m microbatches), as train's")
        ->capture_default_str();
    // Test-only (tests/interop): the first microbatch's logits, f32 [B T, V], for a position-by-position check.
    sub->add_option("--dump-logits", flags->dump_logits, "")->group("");
    return {sub, [flags, sub] { return run_eval(*flags, *sub); }};
}

}  // namespace nb::cli

#include "src/run/trainer.h"

#include <chrono>
#include <csignal>
#include <memory>
#include <stdexcept>

#include <fmt/format.h>

#include "src/run/backend.h"
#include "src/run/checkpoint.h"
#include "src/core/stop_signal.h"
#include "pipeline/stage/stage_checkpoint.h"
#include "src/run/run_log.h"
#include "src/run/train_sample.h"
#include "src/core/error.h"
#include "model/model_step.h"
#include "model/moe_load.h"
#include "model/tied_head_grad.h"
#include "optim/grad_clip.h"
#include "pipeline/schedule/schedule.h"
#include "pipeline/stage/stage_memory.h"
#include "pipeline/stage/stage_state.h"
#include "src/plan/train_data.h"
#include "model/weights_hash.h"

namespace nb {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// This is the single-process loop: one stage and a synchronous schedule (gpipe and 1f1b compute the same
// thing there, see docs/DESIGN.md section 2). `train` hands more stages and the asynchronous schedules to the pipeline
// executor (src/run/pipeline_driver.h).
void require_single_process(const RunPlan& plan) {
    const TrainOptions& o = plan.options;
    if (o.stages > 1 || is_asynchronous(o.schedule))
        throw std::logic_error(fmt::format("--schedule {} --stages {} given to the single-process loop: it runs "
                                           "on the pipeline executor", schedule_kind_name(o.schedule), o.stages));
}

}  // namespace

TrainSummary run_training(const RunPlan& plan, std::FILE* log) {
    require_single_process(plan);
    const TrainOptions& o = plan.options;
    auto data = open_train_data(o);
    RunLog run_log(o, log);

    std::unique_ptr<Ops> backend = make_ops(o.device);
    Ops& ops = *backend;
    const Device device = ops.device();
    // Before the stage allocates any of it: a model that cannot fit is one line (pipeline/stage/stage_memory.h).
    require_memory_fits(0, 1, estimate_cut_memory(o, {whole_model_spec(o.model)}, ops.activation_dtype()),
                        ops.available_memory());
    // --save DIR: this process's for the whole run, with room for a checkpoint, or one line before any step.
    const std::optional<SaveDirLock> save_lock = claim_save_dir(
        o, [&] { return estimate_checkpoint_bytes(o, {whole_model_spec(o.model)}, ops.activation_dtype()); });
    StageState stage(o, whole_model_spec(o.model), device);  // one stage: the whole model
    const StageModel& model = stage.model;
    TensorSet& weights = stage.master;
    TensorSet& grads = stage.grads;
    TensorSet compute_weights = make_compute_weights(ops, model.layout(), weights);
    LrSchedule schedule(o.lr, o.train_iters);
    MicrobatchReader reader(o);
    const TrainSampler sampler(o);

    fmt::print(log, "nobubble: model {} ({} parameters) on {}, {} train windows, {} tokens per iteration, {}\n",
               o.model.preset, model.layout().trainable_numel(), device_name(device), data->train->num_windows(),
               o.tokens_per_iter(), o.describe_update_rule());
    int64_t first_step = 0;
    double elapsed_before_s = 0;  // a resumed run's clock goes on from its checkpoint's
    if (!o.load_path.empty()) {
        const ResumePoint resume = load_one_stage(o, stage, log);
        first_step = resume.saved.step;
        elapsed_before_s = run_log.resumed_at(first_step, resume.saved.elapsed_s);
        data->train->seek(resume.saved.data);
        refresh_compute_weights(ops, weights, compute_weights);
    }
    if (!o.save_dir.empty()) install_stop_signal_handlers();

    int64_t steps_run = first_step;
    const int64_t end = end_iteration(o, first_step);
    const auto run_start = Clock::now();
    for (int64_t step = first_step; step < end; ++step) {
        if (step == o.signal_at_step) record_stop_signal(SIGTERM);
        const auto t0 = Clock::now();
        grads.zero();
        double loss_sum = 0;
        MoeLoadCounter moe_load;  // the step's training forwards only: evaluation below counts nowhere
        for (int64_t i = 0; i < o.num_microbatches; ++i)
            loss_sum += forward_backward(ops, model, compute_weights, grads, reader.next(*data->train, device), 1.0f,
                                         &moe_load, o.recompute);
        const double loss = loss_sum / static_cast<double>(o.num_microbatches);
        add_tied_head_half(ops, model, grads);  // g = E + H, each half summed on its own (model/tied_head_grad.h)
        average_grads(ops, model.layout(), grads, o.num_microbatches);
        const double grad_norm = clip_grad_norm(ops, model.layout(), grads, o.clip_grad);
        const double lr = schedule.lr_at(step);
        stage.optimizer.step(ops, model.layout(), weights, grads, static_cast<float>(lr));
        refresh_compute_weights(ops, weights, compute_weights);
        const double step_seconds = seconds_since(t0);
        const double tokens_per_s = static_cast<double>(o.tokens_per_iter()) / step_seconds;

        IterationReport report{step + 1, o.train_iters, loss, lr, grad_norm, tokens_per_s, step_seconds};
        report.moe = moe_layer_figures(moe_load.blocks(), o.num_microbatches);
        if (data->val && evaluation_due(o, step))
            report.val_loss = validation_loss(*data->val, o, device, [&](const Microbatch& mb) {
                return forward_loss(ops, model, compute_weights, mb);
            });
        if (sampler.due(step + 1)) report.sample = sampler.sample(ops, compute_weights, step + 1);
        report.elapsed_s = elapsed_before_s + seconds_since(run_start);
        run_log.iteration(report);
        steps_run = step + 1;
        const bool signalled = stop_signal_received() != 0;  // with --save only (the handlers' condition)
        if (checkpoint_due(o, steps_run, end) || (signalled && !o.save_dir.empty()))
            save_one_stage(o, steps_run, report.elapsed_s, stage, data->train->position(), log);
        if (signalled) {
            print_stopped_by_signal(log, stop_signal_received(), steps_run);
            break;
        }
    }
    return run_log.summary(steps_run, weights_sha256(weights.to(Device::cpu)));
}

}  // namespace nb

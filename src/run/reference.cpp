#include "src/run/reference.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>

#include <fmt/format.h>

#include "src/run/backend.h"
#include "src/run/checkpoint.h"
#include "src/run/run_log.h"
#include "src/core/error.h"
#include "model/partition.h"
#include "model/stage_model.h"
#include "model/model_step.h"
#include "model/moe_load.h"
#include "model/tied_head_grad.h"
#include "optim/stage_optimizer.h"
#include "optim/grad_clip.h"
#include "optim/lr_schedule.h"
#include "pipeline/stage/stage_checkpoint.h"
#include "pipeline/stage/stage_memory.h"
#include "pipeline/stage/stage_state.h"
#include "pipeline/stage/state_hash.h"
#include "pipeline/stage/tied_gradient.h"
#include "optim/replica_grads.h"
#include "pipeline/stage/weight_history.h"
#include "src/plan/train_data.h"

namespace nb::reference {

// ---- the rules ----

Schedule oracle_schedule(ScheduleKind kind) {
    switch (kind) {
        case ScheduleKind::gpipe: return Schedule::gpipe;
        case ScheduleKind::one_f_one_b: return Schedule::one_f_one_b;
        case ScheduleKind::two_bw: return Schedule::two_bw;
        case ScheduleKind::pipedream: return Schedule::pipedream;
        // Synchronous like 1f1b (g_t = grad F_t(W_t), summed in microbatch order): the same rule; only the order
        // of the compute differs, which the oracle does not have.
        case ScheduleKind::zb_h1:
        case ScheduleKind::zb_v: return Schedule::one_f_one_b;
    }
    throw std::logic_error("oracle_schedule: unknown schedule");
}

bool is_asynchronous(Schedule schedule) { return schedule == Schedule::two_bw || schedule == Schedule::pipedream; }

int64_t microbatches_per_step(Schedule schedule, int64_t microbatches) {
    return schedule == Schedule::pipedream ? 1 : microbatches;
}

int64_t optimizer_steps(Schedule schedule, int64_t iterations, int64_t microbatches) {
    return iterations * microbatches / microbatches_per_step(schedule, microbatches);
}

bool is_synchronous_step(Schedule schedule, int64_t step, const SyncSteps& sync) {
    if (!is_asynchronous(schedule)) return true;
    return step < sync.start || (sync.cooldown > 0 && step >= sync.total - sync.cooldown);
}

int64_t weight_version(Schedule schedule, int stage, int num_stages, int64_t step, const SyncSteps& sync) {
    if (is_synchronous_step(schedule, step, sync)) return step;
    return std::max<int64_t>(schedule == Schedule::pipedream ? sync.start : 0,
                             step - updates_in_flight(schedule, stage, num_stages));
}

int64_t updates_in_flight(Schedule schedule, int stage, int num_stages) {
    switch (schedule) {
        case Schedule::two_bw: return 1;
        case Schedule::pipedream: return num_stages - 1 - stage;
        default: break;
    }
    throw std::logic_error("updates_in_flight: not an asynchronous schedule");
}

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// ---- the stages ----

// One pipeline stage (pipeline/stage/stage_state.h). The versions it computes with live in the WeightHistory.
using Stage = StageState;

// The plan's cut (src/plan/pipeline_cut.h), the one `train` runs with: P parts, or P x V with --virtual-stages
// (the synchronous rule does not depend on the cut; the checkpoint files do, one per part, as train's).
std::vector<std::unique_ptr<Stage>> make_stages(const TrainOptions& o, const std::vector<StageSpec>& cut,
                                                Device device) {
    std::vector<std::unique_ptr<Stage>> stages;
    for (const StageSpec& spec : cut) stages.push_back(std::make_unique<Stage>(o, spec, device));
    return stages;
}

// What a version is made of: the weights the layers compute with (the activation dtype), copied so that the
// optimizer's in-place updates of the master leave the snapshot as it was.
TensorSet compute_snapshot(Ops& ops, const ParamLayout& layout, const TensorSet& master) {
    return clone_tensors(make_compute_weights(ops, layout, master));
}

// ---- one microbatch through all stages ----

// Forward through stage 0..p-1, stage s with weights[s]; backward through p-1..0, each stage accumulating into
// its own gradients. The objective is the microbatch's mean loss (dloss = 1, as the trainer). Returns the loss;
// the MoE blocks' forwards are counted into `moe`.
float forward_backward(Ops& ops, std::vector<std::unique_ptr<Stage>>& stages,
                       const std::vector<const TensorSet*>& weights, const Microbatch& batch, MoeLoadCounter& moe) {
    const size_t p = stages.size();
    std::vector<std::vector<Stash>> stashes(p);
    Tensor x;
    for (size_t s = 0; s < p; ++s) {
        LayerContext ctx{ops, *weights[s], &stages[s]->grads, batch, &moe};
        x = stage_forward(stages[s]->model, ctx, x, &stashes[s]);
    }
    const float loss = x.f32()[0];
    Tensor dx = loss_gradient();
    for (size_t s = p; s-- > 0;) {
        LayerContext ctx{ops, *weights[s], &stages[s]->grads, batch};
        dx = stage_backward(stages[s]->model, ctx, dx, stashes[s]);
    }
    return loss;
}

// Evaluation: forward only, every stage with its newest weights (`weights`: its master's compute weights, never a
// --delay-fix predict prediction).
float forward_loss(Ops& ops, const std::vector<std::unique_ptr<Stage>>& stages, const std::vector<TensorSet>& weights,
                   const Microbatch& batch) {
    Tensor x;
    for (size_t s = 0; s < stages.size(); ++s) {
        LayerContext ctx{ops, weights[s], nullptr, batch};
        x = stage_forward(stages[s]->model, ctx, x, nullptr);
    }
    return x.f32()[0];
}

// ---- clipping ----
//
// Every norm is built from per-parameter sums of squares (ops.sum_squares of one gradient tensor), added one
// after the other into one double in canonical order, then square-rooted:
//   global norm       sum over stage 0's parameters in its layout order, then stage 1's, ..., then sqrt
//   stage s's norm    sum over stage s's parameters in its layout order, then sqrt
// The global order is the whole model's layout order (the stage layouts concatenate to it), so this is exactly
// optim/grad_clip.h's grad_sum_squares over the unsplit model: the bits of `train`. The pipeline reproduces it
// by gathering the per-parameter sums (not per-stage subtotals, which would round differently) and folding them
// in this order. --clip-scope global scales every stage by clip_coefficient(global norm); --clip-scope stage
// scales each stage by clip_coefficient(its own norm). The adding itself is optim/grad_clip.h's
// total_sum_squares, the one rule the pipeline follows too.

using ParamSums = std::vector<std::vector<double>>;  // [stage][parameter]

// Tied embeddings with more than one stage: the first stage holds the matrix, the last stage a copy.
bool tied_across_stages(const std::vector<std::unique_ptr<Stage>>& stages) {
    return stages.size() > 1 && stages.front()->model.config().tie_embeddings;
}

// The tied matrix counts once in every norm: the last stage's copy adds 0 (x + 0 == x, so the sum is the
// one-stage model's).
ParamSums param_sum_squares(Ops& ops, const std::vector<std::unique_ptr<Stage>>& stages) {
    ParamSums sums;
    for (const auto& stage : stages) sums.push_back(nb::param_sum_squares(ops, stage->model.layout(), stage->grads));
    if (tied_across_stages(stages)) sums.back().at(0) = 0;
    return sums;
}

double stage_norm(const ParamSums& sums, size_t stage) { return std::sqrt(total_sum_squares({sums[stage]})); }

double global_norm(const ParamSums& sums) { return std::sqrt(total_sum_squares(sums)); }

// Clips as --clip-scope says and returns the global norm before clipping (what the progress line reports).
double clip_gradients(Ops& ops, std::vector<std::unique_ptr<Stage>>& stages, const TrainOptions& o) {
    const ParamSums sums = param_sum_squares(ops, stages);
    const double global = global_norm(sums);
    for (size_t s = 0; s < stages.size(); ++s) {
        const double norm = o.clip_scope == ClipScope::stage ? stage_norm(sums, s) : global;
        // A tied copy (the last stage's tensor 0) is clipped as the first stage clips the matrix.
        const bool tied_copy = tied_across_stages(stages) && s + 1 == stages.size();
        const double copy_norm = o.clip_scope == ClipScope::stage && tied_copy ? stage_norm(sums, 0) : norm;
        clip_grads_to_norms(ops, stages[s]->model.layout(), stages[s]->grads, norm, copy_norm, o.clip_grad);
    }
    return global;
}

// Once each half of the tied matrix's gradient is summed (over microbatches and replicas): g = E + H
// (model/tied_head_grad.h), on a stage that holds both ends from its own slot, else from the first stage's half
// and the last stage's copy's, into both copies.
void add_tied_halves(Ops& ops, std::vector<std::unique_ptr<Stage>>& stages) {
    for (auto& st : stages) add_tied_head_half(ops, st->model, st->grads);
    if (!tied_across_stages(stages)) return;
    Tensor& embedding = stages.front()->grads[0];
    ops.add_inplace(embedding, stages.back()->grads[0]);
    stages.back()->grads[0] = ops.copy_of(embedding);
}

// ---- the run ----

struct StepResult {
    double loss_sum = 0;  // over the step's microbatches
    double lr = 0;
    double grad_norm = 0;
    std::vector<MoeBlockLoad> moe;  // an iteration's: its MoE blocks' training forwards (model/moe_load.h)
};

class ReferenceRun {
public:
    ReferenceRun(const TrainOptions& o, const std::vector<StageSpec>& cut, Ops& ops)
        : o_(o),
          ops_(ops),
          schedule_(oracle_schedule(o.schedule)),
          sync_{o.sync_start, o.sync_cooldown, optimizer_steps(schedule_, o.train_iters, o.num_microbatches)},
          stages_(make_stages(o, cut, ops.device())),
          history_(static_cast<int>(cut.size())),
          lr_(o.lr, sync_.total),
          reader_(o) {
        for (int s = 0; s < num_stages(); ++s) history_.add(s, 0, version_snapshot(s, 0));
    }

    int num_stages() const { return static_cast<int>(stages_.size()); }
    Stage& stage(int s) { return *stages_[static_cast<size_t>(s)]; }
    const std::vector<std::unique_ptr<Stage>>& stages() const { return stages_; }
    const WeightHistory& history() const { return history_; }

    // Iteration t: optimizer steps [t*k, (t+1)*k) with k = m / microbatches_per_step, consuming the global batch of
    // D m microbatches, read in loader order: replica r's are [r m, (r+1) m), and its step k takes the k-th
    // microbatches_per_step of them. Returns the iteration's summed loss, its last step's lr and norm, and its MoE
    // blocks' loads.
    StepResult run_iteration(int64_t iteration, BatchLoader& train) {
        const int64_t m = o_.num_microbatches, per_step = microbatches_per_step(schedule_, m);
        const int64_t steps = m / per_step;
        std::vector<Microbatch> batch;  // each its own copy: the reader hands out its one buffer again each time
        for (int64_t i = 0; i < o_.microbatches_per_iter(); ++i) {
            Microbatch mb = reader_.next(train, ops_.device());
            batch.push_back({mb.tokens.clone(), mb.targets.clone(), mb.batch_size, mb.seq_len});
        }
        // Per replica, over the iteration's steps: its loss sum (its microbatches in order) and its MoE loads;
        // then replica 1's onto replica 0's, and so on, as replica 0's stages add them (stage_runner.h).
        const auto replicas = static_cast<size_t>(o_.data_parallel_size);
        std::vector<double> loss_sums(replicas, 0.0);
        std::vector<MoeLoadCounter> moe(replicas);
        StepResult total;
        for (int64_t k = 0; k < steps; ++k) {
            std::vector<std::vector<const Microbatch*>> by_replica(replicas);
            for (size_t r = 0; r < replicas; ++r)
                for (int64_t i = 0; i < per_step; ++i)
                    by_replica[r].push_back(&batch[r * static_cast<size_t>(m) + static_cast<size_t>(k * per_step + i)]);
            const StepResult step = run_step(iteration * steps + k, by_replica, loss_sums, moe);
            total.lr = step.lr;
            total.grad_norm = step.grad_norm;
        }
        total.loss_sum = loss_sums[0];
        total.moe = moe[0].blocks();
        for (size_t r = 1; r < replicas; ++r) {
            total.loss_sum += loss_sums[r];
            add_replica_loads(total.moe, moe[r].blocks());
        }
        return total;
    }

    // ---- checkpoints (src/run/checkpoint.h): the executor's files, each stage's from this history ----

    // After iteration `iteration` (step = iteration + 1 in the checkpoint's numbering).
    void save(int64_t step, const LoaderPosition& data, double elapsed_s, std::FILE* log) {
        const std::string dir = make_staging_dir(o_.save_dir, step);
        std::vector<CheckpointEntry> entries;
        SavedRun saved{step, {}, {}, data, elapsed_s};
        for (int s = 0; s < num_stages(); ++s) {
            OlderVersions older;
            const int64_t newest = history_.newest(s);
            for (const auto& [version, weights] : history_.versions(s))
                if (version < newest) older.emplace(version, &weights);
            std::vector<std::pair<std::string, const Tensor*>> carried;
            for (const auto& [name, tensor] : stage(s).state_tensors()) carried.emplace_back(name, tensor);
            const bool tied_copy = tied_across_stages(stages_) && s + 1 == num_stages();  // written once, by stage 0
            const SafetensorsPieces file = stage_file_pieces(carried, stage(s).model.layout(), older, tied_copy);
            entries.push_back(write_checkpoint_file(dir, stage_file_name(s), file.pieces()));
            saved.cut.push_back(stage(s).model.spec());
            saved.steps_taken.push_back(stage(s).optimizer.steps_taken());
        }
        complete_checkpoint(o_, dir, entries, saved, log);
    }

    // Every stage from the checkpoint: its state, and its history = the saved older versions plus the newest.
    void restore(const ResumePoint& resume) {
        for (int s = 0; s < num_stages(); ++s) {
            Stage& st = stage(s);
            const StageFiles files = read_stage_files(resume, st.model.spec(), st.model.config().tie_embeddings);
            std::map<int64_t, TensorSet> versions =
                saved_versions(files.by_name, st.model.layout(), ops_.activation_dtype(), ops_.device(), files.source);
            restore_stage_state(st, files.by_name, files.steps_taken, files.source);
            versions.emplace(files.steps_taken, version_snapshot(s, files.steps_taken));
            history_.replace(s, std::move(versions));
        }
    }

    double validation_loss(BatchLoader& val) {
        std::vector<TensorSet> newest;
        for (auto& st : stages_) newest.push_back(make_compute_weights(ops_, st->model.layout(), st->master));
        return nb::validation_loss(val, o_, ops_.device(),
                                   [&](const Microbatch& mb) { return forward_loss(ops_, stages_, newest, mb); });
    }

private:
    // One optimizer step (steps 1-5 of reference.h) over each replica's microbatches of it: each replica's
    // gradients summed in microbatch order, the replicas' sums added in replica order (optim/replica_grads.h), then
    // scaled by 1 / (D n).
    StepResult run_step(int64_t step, const std::vector<std::vector<const Microbatch*>>& by_replica,
                        std::vector<double>& loss_sums, std::vector<MoeLoadCounter>& moe) {
        std::vector<const TensorSet*> weights;
        for (int s = 0; s < num_stages(); ++s) weights.push_back(&history_.at(s, version_of(s, step)));
        StepResult r;
        std::vector<TensorSet> total;  // D > 1: per stage, the replicas so far
        const bool replicas = by_replica.size() > 1;
        for (size_t replica = 0; replica < by_replica.size(); ++replica) {
            for (auto& st : stages_) st->grads.zero();
            for (const Microbatch* mb : by_replica[replica])
                loss_sums[replica] += forward_backward(ops_, stages_, weights, *mb, moe[replica]);
            for (int s = 0; replicas && s < num_stages(); ++s) {
                if (replica == 0) total.push_back(gradient_slots(stage(s).model, ops_.device()));
                add_replica_grads(ops_, total[static_cast<size_t>(s)], stage(s).grads);
            }
        }
        for (size_t s = 0; s < total.size(); ++s) stages_[s]->grads = std::move(total[s]);
        const int64_t microbatches = static_cast<int64_t>(by_replica.size() * by_replica.front().size());
        add_tied_halves(ops_, stages_);
        for (auto& st : stages_) average_grads(ops_, st->model.layout(), st->grads, microbatches);
        r.grad_norm = clip_gradients(ops_, stages_, o_);
        r.lr = lr_.lr_at(step);
        const bool asynchronous = !is_synchronous_step(schedule_, step, sync_);
        for (int s = 0; s < num_stages(); ++s) {
            Stage& st = stage(s);
            const int64_t version = version_of(s, step);
            const TensorSet* stale = version < step ? &history_.at(s, version) : nullptr;
            st.optimizer.step(ops_, st.model.layout(), st.master, st.grads, static_cast<float>(r.lr), asynchronous,
                              stale);
            advance_history(s, step);
        }
        return r;
    }

    // After step `step`, stage s holds W_{step+1}. The versions later steps use are those >= the version of the
    // next step (the rule never decreases): drop the older ones first, then add the new one, so the history
    // never holds more than the schedule needs.
    void advance_history(int s, int64_t step) {
        history_.drop_older_than(s, version_of(s, step + 1));
        history_.add(s, step + 1, version_snapshot(s, step + 1));
    }

    // W_version of stage s from its master, which holds it now: the compute weights, or under --delay-fix predict
    // (lookahead), where only steps later than `version` use it (version >= 1 and step `version` itself uses an
    // older one: 2bw's step t uses W_{t-1}, pipedream's W_{t-(p-1-s)}), their prediction
    // W_version - (lambda k) u_{version-1}, k the updates those steps lag (lookahead's look-ahead point
    // W_version - gamma d_version) (optim/delay_fix.h).
    TensorSet version_snapshot(int s, int64_t version) {
        Stage& st = stage(s);
        TensorSet weights = compute_snapshot(ops_, st.model.layout(), st.master);
        if (o_.delay_fix.predicts() && version >= 1 && version_of(s, version) != version)
            st.optimizer.predict_weights(ops_, st.model.layout(), st.master, weights,
                                         updates_in_flight(schedule_, s, num_stages()));
        return weights;
    }

    int64_t version_of(int s, int64_t step) const { return weight_version(schedule_, s, num_stages(), step, sync_); }

    const TrainOptions& o_;
    Ops& ops_;
    Schedule schedule_;
    SyncSteps sync_;
    std::vector<std::unique_ptr<Stage>> stages_;
    WeightHistory history_;
    LrSchedule lr_;
    MicrobatchReader reader_;
};

// "blocks 0-1 | 2-3 | 4": what each stage holds.
std::string describe_cut(const std::vector<std::unique_ptr<Stage>>& stages) {
    std::vector<StageSpec> cut;
    for (const auto& st : stages) cut.push_back(st->model.spec());
    return nb::describe_cut(cut);
}

// The fingerprints of pipeline/stage/state_hash.h: every stage's master weights, and every stage's optimizer state.
std::string weights_hash(const std::vector<std::unique_ptr<Stage>>& stages) {
    std::vector<std::vector<Tensor>> all;
    for (const auto& st : stages) all.push_back(st->master.tensors);
    return stages_weights_sha256(std::move(all), stages.front()->model.config().tie_embeddings);
}

std::string optimizer_hash(const std::vector<std::unique_ptr<Stage>>& stages) {
    std::vector<std::vector<Tensor>> all;
    for (const auto& st : stages) all.push_back(st->optimizer.state_in_order());
    return stages_sha256(all);
}

}  // namespace

ReferenceSummary run_reference(const RunPlan& plan, std::FILE* log) {
    const TrainOptions& o = plan.options;
    if (o.signal_at_step >= 0)
        throw UsageError("--signal-at-step: the reference takes no signals (it is a flag of train)");
    if (!o.trace_path.empty())
        throw UsageError("--trace: the reference runs no pipeline to trace (it is a flag of train)");
    auto data = open_train_data(o);
    RunLog run_log(o, log);
    std::unique_ptr<Ops> backend = make_ops(o.device);
    // Before a stage allocates: a model that cannot fit is one line (pipeline/stage/stage_memory.h; a floor here).
    const std::vector<StageSpec>& cut = plan.cut;
    require_memory_fits(0, static_cast<int>(cut.size()), estimate_cut_memory(o, cut, backend->activation_dtype()),
                        backend->available_memory());
    // --save DIR: this process's for the whole run, with room for a checkpoint (a floor: one weight version per
    // stage), or one line before any step.
    const std::optional<SaveDirLock> save_lock =
        claim_save_dir(o, [&] { return estimate_checkpoint_bytes(o, cut, backend->activation_dtype()); });
    ReferenceRun run(o, cut, *backend);

    int64_t params = 0;
    for (const auto& st : run.stages()) params += st->model.layout().trainable_numel();
    const int64_t steps = optimizer_steps(oracle_schedule(o.schedule), o.train_iters, o.num_microbatches);
    fmt::print(log, "nobubble reference: --schedule {} on {} ({}), model {} ({} parameters) on {}, "
               "{} train windows, {} tokens per iteration, {} optimizer steps, {}\n",
               schedule_kind_name(o.schedule), o.describe_stages(), describe_cut(run.stages()), o.model.preset, params,
               device_name(backend->device()), data->train->num_windows(), o.tokens_per_iter(), steps,
               o.describe_update_rule());

    int64_t first = 0;
    double elapsed_before_s = 0;  // a resumed run's clock goes on from its checkpoint's
    if (!o.load_path.empty()) {
        const ResumePoint resume = read_resume_point(o, cut);
        run.restore(resume);
        data->train->seek(resume.saved.data);
        first = resume.saved.step;
        print_resumed(resume, static_cast<int>(cut.size()), log);
        elapsed_before_s = run_log.resumed_at(first, resume.saved.elapsed_s);
    }
    const int64_t end = end_iteration(o, first);
    const auto run_start = Clock::now();
    for (int64_t t = first; t < end; ++t) {
        const auto t0 = Clock::now();
        const StepResult r = run.run_iteration(t, *data->train);
        const double seconds = seconds_since(t0);
        const double loss = r.loss_sum / static_cast<double>(o.microbatches_per_iter());
        IterationReport report{t + 1, o.train_iters, loss, r.lr, r.grad_norm,
                               static_cast<double>(o.tokens_per_iter()) / seconds, seconds};
        report.moe = moe_layer_figures(r.moe, o.microbatches_per_iter());
        if (data->val && evaluation_due(o, t)) report.val_loss = run.validation_loss(*data->val);
        report.elapsed_s = elapsed_before_s + seconds_since(run_start);
        run_log.iteration(report);
        const int64_t done = t + 1;
        if (checkpoint_due(o, done, end)) run.save(done, data->train->position(), report.elapsed_s, log);
    }
    ReferenceSummary summary{run_log.summary(end * steps / o.train_iters, weights_hash(run.stages())),
                             optimizer_hash(run.stages()), {}};
    for (int s = 0; s < run.num_stages(); ++s) summary.peak_versions.push_back(run.history().peak_held(s));
    return summary;
}

}  // namespace nb::reference

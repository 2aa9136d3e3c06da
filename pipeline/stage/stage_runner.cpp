#include "pipeline/stage/stage_runner.h"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

#include "src/core/checkpoint_dir.h"
#include "src/core/stop_signal.h"
#include "model/model_step.h"
#include "pipeline/stage/stage_checkpoint.h"
#include "pipeline/stage/stage_moe_observer.h"
#include "pipeline/stage/stage_report.h"

namespace nb {

namespace {

// The reader refills its host buffers for every microbatch, and on the CPU the microbatch it hands out is
// those buffers themselves. A microbatch that waits in flight for its backward needs its own copy.
Microbatch own_copy(const Microbatch& mb) {
    if (mb.tokens.device() != Device::cpu) return mb;  // already copied to the device by the reader
    return {mb.tokens.clone(), mb.targets.clone(), mb.batch_size, mb.seq_len};
}

// --delay-fix predict: the stage's optimizer writes a predicted version (optim/delay_fix.h), as many updates
// ahead as the stage's asynchronous steps lag; nothing otherwise.
PredictWeights predict_weights_of(Ops& ops, StageState& state, int64_t updates_ahead) {
    if (!state.optimizer.predicts()) return {};
    return [&ops, &state, updates_ahead](const TensorSet& master, TensorSet& out) {
        state.optimizer.predict_weights(ops, state.model.layout(), master, out, updates_ahead);
    };
}

Tensor take(std::map<int64_t, Tensor>& from, int64_t microbatch, const char* what) {
    auto node = from.extract(microbatch);
    if (node.empty()) throw std::logic_error(fmt::format("{} of microbatch {} is not here", what, microbatch));
    return std::move(node.mapped());
}

}  // namespace

StageRunner::StageRunner(const PipelineSetup& setup, int stage, Transport& transport, Ops& ops, Transport* replicas,
                         std::unique_ptr<ReplicaSum> replica_sum)
    : setup_(setup),
      o_(setup.options),
      stage_(stage),
      first_(setup.cut.at(static_cast<size_t>(stage)).has_embedding),
      last_(setup.cut.at(static_cast<size_t>(stage)).has_head),
      transport_(transport),
      ops_(ops),
      replicas_(replicas),
      replica_(replicas ? replicas->stage() : 0),
      faults_(o_, replica_ * setup.num_stages() + stage),  // the rank the --*-rank flags name
      meter_(StageClock::Clock::now(), !o_.trace_path.empty()),
      step_(setup, stage, transport, ops, replicas, std::move(replica_sum), meter_, faults_),
      versions_(ops, step_.state().model.layout(), step_.state().master,
                setup.version_uses(stage, o_.delay_fix.kind == DelayFixKind::taylor),
                predict_weights_of(ops, step_.state(), asynchronous_delay(setup.spec, setup.rank_of_stage(stage)))),
      data_(open_train_data(o_)),
      train_reader_(o_),
      evaluation_(setup, stage, transport, ops, replicas, step_.state().model, data_->val.get(), meter_),
      vote_(!o_.save_dir.empty(), setup.num_stages(), setup.first_iteration, setup.end_iteration, replicas,
            stage),
      tasks_(setup, stage, data_->val != nullptr && replica_ == 0),
      next_forward_(setup.first_iteration * o_.num_microbatches),
      next_backward_(next_forward_),
      next_weight_(next_forward_) {
    if (transport.stage() != stage || transport.num_stages() != setup.num_stages())
        throw std::logic_error(fmt::format("stage {} of {} given the transport of stage {} of {}", stage,
                                           setup.num_stages(), transport.stage(), transport.num_stages()));
    if (replicas && replicas->num_stages() != o_.data_parallel_size)
        throw std::logic_error(fmt::format("a replica transport of {} replicas for --data-parallel-size {}",
                                           replicas->num_stages(), o_.data_parallel_size));
    fill_window();
}

// The window holds the next kLookahead tasks and one more (those whose receives may be posted): the run's tasks
// are made only this far ahead.
void StageRunner::fill_window() {
    while (window_.size() <= kLookahead)
        if (std::optional<StageTask> t = tasks_.next())
            window_.push_back(*t);
        else
            break;
}

void StageRunner::task_done() {
    window_.pop_front();
    posted_ = posted_ > 0 ? posted_ - 1 : 0;
    fill_window();
}

std::string StageRunner::next_task() const {
    if (done()) return "done";
    const StageTask& task = window_.front();
    // Held at the gate: the task has not begun, the stop vote it needs has not come. A save task names itself
    // only where a checkpoint is due; elsewhere it only asks whether the run stops there.
    if (!vote_.decided(gated_iteration(task))) {
        if (task.kind == StageTask::Kind::save && !setup_.saves_after(task.iteration)) return vote_.waits_for();
        return describe(task) + ": " + vote_.waits_for();
    }
    // A blocked optimizer step or evaluation waits for something its description does not name.
    if (task.kind == StageTask::Kind::action && task.action.type == ActionType::optimizer_step)
        if (const std::optional<std::string> waits = step_.waits_for()) return describe(task) + ": " + *waits;
    if (task.kind == StageTask::Kind::evaluate && !first_)
        return fmt::format("{}: its input from stage {}", describe(task), stage_ - 1);
    if (turns_ && task.kind == StageTask::Kind::action && uses_weights(task.action.type) &&
        !turns_->is_turn(task.action.chunk))
        return fmt::format("{}: its turn, after the rank's chunk {} computes", describe(task), turns_->next_chunk());
    return describe(task);
}

void StageRunner::restore(const std::map<std::string, const Tensor*>& saved, int64_t steps_taken, LoaderPosition data,
                          const std::string& source) {
    std::map<int64_t, TensorSet> older =
        saved_versions(saved, step_.state().model.layout(), ops_.activation_dtype(), ops_.device(), source);
    restore_stage_state(step_.state(), saved, steps_taken, source);
    versions_.restore(steps_taken, std::move(older), source);
    data_->train->seek(data);
}

void StageRunner::start_clock(StageClock::Clock::time_point origin) { meter_.start_clock(origin); }

bool StageRunner::try_advance() {
    if (done()) return false;
    meter_.task_started();
    post_receives_ahead();
    const StageTask& task = window_.front();
    if (!gate(task)) {
        meter_.blocked(task, false);
        return false;
    }
    if (vote_.stop_iteration() < setup_.end_iteration && !tasks_dropped_) {
        drop_tasks_after_stop();
        return true;  // the next task may be another one now
    }
    post_receives_ahead();  // again: the gate may have opened an iteration
    const bool computes = task.kind == StageTask::Kind::action && uses_weights(task.action.type);
    if (computes && turns_ && !turns_->is_turn(task.action.chunk)) {
        meter_.blocked(task, false);  // another chunk of this rank computes first
        return false;
    }
    if (task.kind == StageTask::Kind::action) faults_.as_step_begins(task.action.step);
    const bool step_begun_before = step_.begun();
    if (!run(task)) {
        // An optimizer step under the global clip does its own part (average, sums of squares) and then waits.
        meter_.blocked(task, step_.begun() && !step_begun_before);
        return false;
    }
    meter_.task_ran(task);
    if (computes && turns_) turns_->took(task.action.chunk);
    task_done();
    return true;
}

// Posting a receive early lets the message land while this stage computes (and over MPI, straight into its
// buffer). Posting only a few tasks ahead bounds the buffers waiting.
void StageRunner::post_receives_ahead() {
    const size_t end = std::min(window_.size(), kLookahead);
    const Shape shape = {setup_.rows(), o_.model.hidden_size};
    size_t i = posted_;
    for (; i < end; ++i) {
        const StageTask& t = window_[i];
        if (iteration_of(setup_, t) > vote_.open_until()) break;  // not known to run yet
        if (t.kind == StageTask::Kind::action &&
            (t.action.type == ActionType::recv_activation || t.action.type == ActionType::recv_gradient))
            transport_.post_recv(t.action.peer, tag_of(t.action), shape, ops_.activation_dtype());
        if (t.kind == StageTask::Kind::evaluate && !first_)
            transport_.post_recv(stage_ - 1, {Channel::eval_activation, t.eval_index}, shape, ops_.activation_dtype());
    }
    posted_ = std::max(posted_, i);
}

// A task of iteration i may start once the stages' votes say that i runs; the save after iteration i also
// needs to know whether i + 1 does (if not, i is the last and saves).
bool StageRunner::gate(const StageTask& task) { return vote_.known(transport_, gated_iteration(task)); }

int64_t StageRunner::gated_iteration(const StageTask& task) const {
    const int64_t iteration = iteration_of(setup_, task);
    return task.kind == StageTask::Kind::save ? iteration + 1 : iteration;
}

// The stages agreed to stop before setup.end_iteration: no task of the iterations after the stop has started or
// posted a receive (gate), so they go, and the run finishes after the last one's save.
void StageRunner::drop_tasks_after_stop() {
    const int64_t stop = vote_.stop_iteration();
    std::erase_if(window_, [&](const StageTask& t) {
        return t.kind != StageTask::Kind::finish && iteration_of(setup_, t) >= stop;
    });
    tasks_.end_before_iteration(stop);
    fill_window();
    tasks_dropped_ = true;
}

bool StageRunner::run(const StageTask& task) {
    switch (task.kind) {
        case StageTask::Kind::action: return run_action(task.action);
        case StageTask::Kind::evaluate: return evaluation_.evaluate(task, versions_.newest());
        case StageTask::Kind::report: return evaluation_.report(task, step_.reported_sums());
        case StageTask::Kind::vote: return vote(task);
        case StageTask::Kind::save: return save(task);
        case StageTask::Kind::finish: return finish();
    }
    return false;
}

bool StageRunner::run_action(const Action& a) {
    switch (a.type) {
        case ActionType::recv_activation: return receive(a, activations_in_);
        case ActionType::recv_gradient: return receive(a, gradients_in_);
        case ActionType::forward: forward(a); return true;
        case ActionType::backward: backward(a, false); return true;
        case ActionType::backward_input: backward(a, true); return true;
        case ActionType::backward_weight: backward_weight(a); return true;
        case ActionType::send_activation: send(a, activations_out_); return true;
        case ActionType::send_gradient: send(a, gradients_out_); return true;
        case ActionType::optimizer_step: return step_.try_step(a, versions_);
    }
    return false;
}

MessageTag StageRunner::tag_of(const Action& a) const {
    const bool forward_direction = a.type == ActionType::send_activation || a.type == ActionType::recv_activation;
    return {forward_direction ? Channel::activation : Channel::gradient, a.microbatch};
}

int64_t StageRunner::iteration_of_microbatch(int64_t microbatch) const { return microbatch / o_.num_microbatches; }

// ---- communication ----

bool StageRunner::receive(const Action& a, std::map<int64_t, Tensor>& into) {
    faults_.die_if_asked(KillPoint::receive, a.step);
    std::optional<Tensor> t = transport_.try_take(a.peer, tag_of(a));
    if (!t) return false;
    into.emplace(a.microbatch, std::move(*t));
    return true;
}

void StageRunner::send(const Action& a, std::map<int64_t, Tensor>& from) {
    transport_.send(a.peer, tag_of(a), take(from, a.microbatch, action_type_name(a.type).data()));
}

// ---- compute ----

void StageRunner::forward(const Action& a) {
    if (a.microbatch != next_forward_)  // the data is read in microbatch order
        throw std::logic_error(fmt::format("forward of microbatch {} when {} is next", a.microbatch, next_forward_));
    faults_.die_if_asked(KillPoint::forward, a.step);
    ++next_forward_;
    // Replica r's share of each global batch starts r m microbatches into it (the other replicas read the rest).
    if (replicas_ && a.microbatch % o_.num_microbatches == 0)
        data_->train->seek(data_->train->position_after(data_microbatch(a.microbatch) * o_.micro_batch_size));
    InFlight& f = in_flight_[a.microbatch];
    f.batch = own_copy(train_reader_.next(*data_->train, ops_.device()));
    Tensor x = first_ ? Tensor{} : take(activations_in_, a.microbatch, "the input activation");
    StageMoeObserver moe(meter_, evaluation_.moe_loads(iteration_of_microbatch(a.microbatch)), a.microbatch,
                         a.version);
    LayerContext ctx{ops_, versions_.at(a.version), &step_.state().grads, f.batch, &moe};
    Tensor y = stage_forward(step_.state().model, ctx, x, &f.stashes, o_.recompute);
    versions_.release(a.version);
    f.stash_bytes = stash_bytes(f.stashes);
    meter_.stash_added(f.stash_bytes);
    if (last_)
        evaluation_.add_training_loss(iteration_of_microbatch(a.microbatch), y.f32()[0]);
    else
        activations_out_.emplace(a.microbatch, std::move(y));
}

// The fused backward, or with `input_only` B, the input half of a split one (the stash then keeps what W reads,
// counted as held from now on). Each backward (or W) adds onto the step's gradient sum, so their order is the
// order of the sum: it must be the oracle's, microbatch order, whatever the schedule.
void StageRunner::backward(const Action& a, bool input_only) {
    if (a.microbatch != next_backward_)
        throw std::logic_error(
            fmt::format("backward of microbatch {} when {} is next: gradients are summed "
                        "in microbatch order",
                        a.microbatch, next_backward_));
    if (setup_.spec.step_of(a.microbatch) != a.step)
        throw std::logic_error(fmt::format("backward of microbatch {} counted in step {}", a.microbatch, a.step));
    ++next_backward_;
    auto it = in_flight_.find(a.microbatch);
    if (it == in_flight_.end() || it->second.input_done)
        throw std::logic_error(fmt::format("backward of microbatch {} before its forward", a.microbatch));
    InFlight& f = it->second;
    Tensor dy = last_ ? loss_gradient() : take(gradients_in_, a.microbatch, "the output gradient");
    StageMoeObserver moe(meter_, nullptr, a.microbatch, a.version);  // for --trace: the loads were counted forward
    LayerContext ctx{ops_, versions_.at(a.version), &step_.state().grads, f.batch, &moe};
    const StageModel& model = step_.state().model;
    size_t peak_bytes = 0;  // this microbatch's stashes at their most during the backward (a rerun's on top)
    Tensor dx = input_only ? stage_backward_input(model, ctx, dy, f.stashes, &peak_bytes)
                           : stage_backward(model, ctx, dy, f.stashes, step_.replica_observer(a.step), &peak_bytes);
    versions_.release(a.version);
    meter_.stash_held_briefly(peak_bytes - std::min(peak_bytes, f.stash_bytes));
    meter_.stash_released(f.stash_bytes);
    if (input_only) {
        f.input_done = true;
        f.stash_bytes = stash_bytes(f.stashes);
        meter_.stash_added(f.stash_bytes);
    } else {
        in_flight_.erase(it);
        step_.gradient_added();
    }
    if (!first_) gradients_out_.emplace(a.microbatch, std::move(dx));
}

// W: the weight gradients into the step's sum. W runs in microbatch order, so the sum is the fused one's.
void StageRunner::backward_weight(const Action& a) {
    if (a.microbatch != next_weight_)
        throw std::logic_error(fmt::format("W of microbatch {} when {} is next: gradients are summed in microbatch order",
                                           a.microbatch, next_weight_));
    auto node = in_flight_.extract(a.microbatch);
    if (node.empty() || !node.mapped().input_done)
        throw std::logic_error(fmt::format("W of microbatch {} before its B", a.microbatch));
    ++next_weight_;
    InFlight& f = node.mapped();
    LayerContext ctx{ops_, versions_.at(a.version), &step_.state().grads, f.batch};
    stage_backward_weight(step_.state().model, ctx, f.stashes, step_.replica_observer(a.step));
    versions_.release(a.version);
    meter_.stash_released(f.stash_bytes);
    step_.gradient_added();
}

// The microbatch of the data that this replica's `microbatch` (counted as one replica's: m per iteration) is.
int64_t StageRunner::data_microbatch(int64_t microbatch) const {
    const int64_t m = o_.num_microbatches;
    return (microbatch / m) * o_.microbatches_per_iter() + replica_ * m + microbatch % m;
}

// ---- checkpoints ----

bool StageRunner::vote(const StageTask& task) {
    vote_.vote(transport_, task.iteration, stop_signal_received());
    return true;
}

// The stage's file of checkpoint step t = iteration + 1 (its state after the update that ended the iteration),
// then its size and sha256 to stage 0 (src/run/progress_collector.h writes the manifest once all have come).
bool StageRunner::save(const StageTask& task) {
    const int64_t step = task.iteration + 1;
    if (!setup_.saves_after(task.iteration) && !vote_.ends_early_after(task.iteration)) return true;
    if (replica_ > 0) {  // the replicas hold the same weights: replica 0's file is the stage's
        step_.send_state(step);
        return true;
    }
    const std::optional<std::vector<std::pair<std::string, const Tensor*>>> state = step_.whole_optimizer_state(step);
    if (!state) return false;  // the other owners' state is on its way
    std::vector<std::pair<std::string, const Tensor*>> carried;
    const StageState& st = step_.state();
    const ParamLayout& layout = st.model.layout();
    for (int i = 0; i < layout.size(); ++i) carried.emplace_back("weights." + layout[i].name, &st.master[i]);
    carried.insert(carried.end(), state->begin(), state->end());
    const std::string dir = make_staging_dir(o_.save_dir, step);
    const SafetensorsPieces file =
        stage_file_pieces(carried, layout, versions_.older_versions(), step_.holds_tied_copy());
    if (const std::optional<int64_t> kill = faults_.kill_step(KillPoint::checkpoint);
        kill && setup_.iteration_of_step(*kill) <= task.iteration)
        die_writing_half(dir + "/" + stage_file_name(stage_), file.joined());
    const CheckpointEntry entry = write_checkpoint_file(dir, stage_file_name(stage_), file.pieces());
    const LoaderPosition data = data_->train->position_after(step * o_.microbatches_per_iter() * o_.micro_batch_size);
    const CheckpointReport r{entry.bytes, st.optimizer.steps_taken(), data.epoch, data.index, entry.sha256,
                             static_cast<double>(meter_.now_ns()) * 1e-9};
    transport_.send_values(0, {Channel::checkpoint, step}, r.to_values());
    return true;
}

// To stage 0: the master weights, the optimizer state (both hashed there, pipeline/stage/state_hash.h), the final
// values and, with --trace, the timed records. Every stop vote started is taken first (MPI wants every
// collective completed).
bool StageRunner::finish() {
    if (!vote_.drain(transport_)) return false;
    const TensorSet& master = step_.state().master;
    if (!evaluation_.replicas_agree(master)) return false;
    const int64_t key = setup_.end_iteration + 1;  // after every checkpoint's gather
    if (replica_ > 0) {  // replica 0 sends for the stage
        step_.send_state(key);
        return true;
    }
    const std::optional<std::vector<std::pair<std::string, const Tensor*>>> state = step_.whole_optimizer_state(key);
    if (!state) return false;
    for (int i = 0; i < master.size(); ++i) transport_.send(0, {Channel::final_weights, i}, master[i]);
    for (size_t i = 0; i < state->size(); ++i)
        transport_.send(0, {Channel::final_optimizer, static_cast<int64_t>(i)}, *(*state)[i].second);
    StageFinal f;
    f.peak_versions = versions_.peak_held();
    std::optional<std::vector<double>> trace = meter_.finish(f);
    transport_.send_values(0, {Channel::final_values, 0}, f.to_values());
    if (trace) transport_.send_values(0, {Channel::trace, 0}, std::move(*trace));
    return true;
}

}  // namespace nb

#include "pipeline/stage/stage_runner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <numeric>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>

#include "src/core/checkpoint_dir.h"
#include "src/core/error.h"
#include "src/core/stop_signal.h"
#include "model/model_step.h"
#include "optim/grad_clip.h"
#include "optim/optimizer_shards.h"
#include "pipeline/stage/fault_injection.h"
#include "pipeline/stage/stage_checkpoint.h"
#include "pipeline/stage/stage_moe_observer.h"
#include "pipeline/stage/stage_report.h"
#include "pipeline/stage/state_hash.h"
#include "src/plan/train_progress.h"

namespace nb {

namespace {

// The reader refills its host buffers for every microbatch, and on the CPU the microbatch it hands out is
// those buffers themselves. A microbatch that waits in flight for its backward needs its own copy.
Microbatch own_copy(const Microbatch& mb) {
    if (mb.tokens.device() != Device::cpu) return mb;  // already copied to the device by the reader
    return {mb.tokens.clone(), mb.targets.clone(), mb.batch_size, mb.seq_len};
}

// --use-distributed-optimizer with replicas: who owns each tensor of the stage (optim/optimizer_shards.h).
// The most tensors any stage's layout has (the replica channels' tags are dense in them).
int64_t most_tensors(const PipelineSetup& setup) {
    int64_t most = 1;
    for (const ParamLayout& l : setup.layouts) most = std::max<int64_t>(most, l.size());
    return most;
}

// At least the most shards (a tensor's rows fall to D replicas at most, at most D - 1 tensors are cut) and
// state tensors (every optimizer keeps at most 6 per parameter, SOAP's, and the delay fix one) of any stage.
int64_t shard_tag_stride(const PipelineSetup& setup) {
    return 8 * most_tensors(setup) + setup.options.data_parallel_size;
}

std::vector<TensorShard> distributed_shards(const PipelineSetup& setup, int stage, const Transport* replicas) {
    const TrainOptions& o = setup.options;
    if (!replicas || !o.distributed_optimizer) return {};
    return optimizer_shards(o.optimizer, o.delay_fix, setup.layouts.at(static_cast<size_t>(stage)),
                            o.data_parallel_size);
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
      fault_rank_(replica_ * setup.num_stages() + stage),
      replica_sum_(!replicas     ? nullptr
                   : replica_sum ? std::move(replica_sum)
                                 : std::make_unique<ReplicaGradSum>(*replicas, stage, setup.num_stages(),
                                                                    most_tensors(setup))),
      shard_plan_(distributed_shards(setup, stage, replicas)),
      state_(shard_plan_.empty() ? StageState(o_, setup.cut[static_cast<size_t>(stage)], ops.device())
                                 : StageState(o_, setup.cut[static_cast<size_t>(stage)], ops.device(),
                                              owned_shards(shard_plan_, replica_))),
      shards_(shard_plan_.empty() ? nullptr
                              : std::make_unique<ShardExchange>(
                                    *replicas, stage, setup.num_stages(), setup.layouts.at(static_cast<size_t>(stage)),
                                    shard_plan_,
                                    stage_optimizer_state_entries(o_.optimizer, o_.delay_fix,
                                                                  setup.layouts.at(static_cast<size_t>(stage)),
                                                                  o_.lr.lr),
                                    shard_tag_stride(setup))),
      lr_(o_.lr, setup.spec.optimizer_steps()),
      versions_(ops, state_.model.layout(), state_.master,
                setup.version_uses(stage, o_.delay_fix.kind == DelayFixKind::taylor),
                predict_weights_of(ops, state_, asynchronous_delay(setup.spec, setup.rank_of_stage(stage)))),
      data_(open_train_data(o_)),
      train_reader_(o_),
      val_reader_(o_),
      vote_(!o_.save_dir.empty(), setup.num_stages(), setup.first_iteration, setup.end_iteration, replicas,
            stage),
      tasks_(setup, stage, data_->val != nullptr && replica_ == 0),
      next_forward_(setup.first_iteration * o_.num_microbatches),
      next_backward_(next_forward_),
      next_weight_(next_forward_),
      meter_(StageClock::Clock::now(), !o_.trace_path.empty()) {
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
    if (replica_sum_ && replica_sum_->in_flight() && task.kind == StageTask::Kind::action &&
        task.action.type == ActionType::optimizer_step)
        return describe(task) + ": " + replica_sum_->waits_for();
    if (weights_pending_) return describe(task) + ": " + shards_->waits_for();
    if (step_begun_) return describe(task) + ": the all-gather of every stage's clip sums (--clip-scope global)";
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
        saved_versions(saved, state_.model.layout(), ops_.activation_dtype(), ops_.device(), source);
    restore_stage_state(state_, saved, steps_taken, source);
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
    inject_fault(task);
    const bool step_begun_before = step_begun_;
    if (!run(task)) {
        // An optimizer step under the global clip does its own part (average, sums of squares) and then waits.
        meter_.blocked(task, step_begun_ && !step_begun_before);
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

void StageRunner::inject_fault(const StageTask& task) {
    if (task.kind != StageTask::Kind::action) return;
    if (fault_rank_ == o_.signal_rank && task.action.step == o_.signal_at_step) record_stop_signal(SIGTERM);
    if (fault_rank_ == o_.stall_rank && task.action.step == o_.stall_at_step) stall_forever();
    if (fault_rank_ != o_.fail_rank || task.action.step != o_.fail_at_step) return;
    throw RuntimeError(fmt::format("injected failure as step {} begins (--fail-at-step {} --fail-rank {})",
                                   o_.fail_at_step, o_.fail_at_step, o_.fail_rank));
}

bool StageRunner::kill_asked(KillPoint point) const {
    return fault_rank_ == o_.kill_rank && o_.kill_during == point;
}

void StageRunner::die_if_asked(KillPoint point, int64_t step) const {
    if (kill_asked(point) && step == o_.kill_at_step) die_by_sigkill();
}

bool StageRunner::run(const StageTask& task) {
    switch (task.kind) {
        case StageTask::Kind::action: return run_action(task.action);
        case StageTask::Kind::evaluate: return evaluate(task);
        case StageTask::Kind::report: return report(task);
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
        case ActionType::optimizer_step: return optimizer_step(a);
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
    die_if_asked(KillPoint::receive, a.step);
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
    die_if_asked(KillPoint::forward, a.step);
    ++next_forward_;
    // Replica r's share of each global batch starts r m microbatches into it (the other replicas read the rest).
    if (replicas_ && a.microbatch % o_.num_microbatches == 0)
        data_->train->seek(data_->train->position_after(data_microbatch(a.microbatch) * o_.micro_batch_size));
    InFlight& f = in_flight_[a.microbatch];
    f.batch = own_copy(train_reader_.next(*data_->train, ops_.device()));
    Tensor x = first_ ? Tensor{} : take(activations_in_, a.microbatch, "the input activation");
    StageMoeObserver moe(meter_, &moe_loads_[iteration_of_microbatch(a.microbatch)], a.microbatch, a.version);
    LayerContext ctx{ops_, versions_.at(a.version), &state_.grads, f.batch, &moe};
    Tensor y = stage_forward(state_.model, ctx, x, &f.stashes);
    versions_.release(a.version);
    for (const Stash& st : f.stashes) f.stash_bytes += st.bytes();
    meter_.stash_added(f.stash_bytes);
    if (last_)
        loss_sums_[iteration_of_microbatch(a.microbatch)] += y.f32()[0];
    else
        activations_out_.emplace(a.microbatch, std::move(y));
}

namespace {

// The step's last backward (or W) tells the replica sum, layer by layer, which gradient slots are final, so that
// each bucket is on its way while the layers before it still compute (Megatron's --overlap-grad-reduce).
class ReplicaSumFeed final : public GradsDoneObserver {
public:
    explicit ReplicaSumFeed(ReplicaSum& sum) : sum_(sum) {}
    void grads_done_from(int first_param) override { sum_.slots_done_from(first_param); }

private:
    ReplicaSum& sum_;
};

// With replicas, the backward (or W) that adds the step's last gradient begins their sum and feeds it: the feed
// to hand it; nothing otherwise.
std::optional<ReplicaSumFeed> replica_sum_feed(ReplicaSum* sum, bool last_of_step, int64_t step, TensorSet& grads) {
    if (!sum || !last_of_step) return std::nullopt;
    sum->begin(step, grads.tensors);
    return std::optional<ReplicaSumFeed>(std::in_place, *sum);
}

}  // namespace

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
    LayerContext ctx{ops_, versions_.at(a.version), &state_.grads, f.batch, &moe};
    std::optional<ReplicaSumFeed> feed =
        replica_sum_feed(replica_sum_.get(), !input_only && last_gradient_of_step(), a.step, state_.grads);
    Tensor dx = input_only ? stage_backward_input(state_.model, ctx, dy, f.stashes)
                           : stage_backward(state_.model, ctx, dy, f.stashes, feed ? &*feed : nullptr);
    versions_.release(a.version);
    meter_.stash_released(f.stash_bytes);
    if (input_only) {
        f.input_done = true;
        f.stash_bytes = stash_bytes(f.stashes);
        meter_.stash_added(f.stash_bytes);
    } else {
        in_flight_.erase(it);
        gradient_added();
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
    LayerContext ctx{ops_, versions_.at(a.version), &state_.grads, f.batch};
    std::optional<ReplicaSumFeed> feed =
        replica_sum_feed(replica_sum_.get(), last_gradient_of_step(), a.step, state_.grads);
    stage_backward_weight(state_.model, ctx, f.stashes, feed ? &*feed : nullptr);
    versions_.release(a.version);
    meter_.stash_released(f.stash_bytes);
    gradient_added();
}

// Whether the backward (or W) about to run adds the step's last gradient: with replicas, it begins the sum over
// them and feeds it bucket by bucket (ReplicaSumFeed); the sum runs on while the stage goes on with its list up to
// the step (sends, the next forwards), which waits for it.
bool StageRunner::last_gradient_of_step() const { return accumulated_ + 1 == setup_.spec.microbatches_per_step(); }

// One more microbatch's gradient is in the step's sum; after the last, every bucket of the replica sum has started
// (slots_done_from(0) again: a no-op that fails loudly if the sum was never begun).
void StageRunner::gradient_added() {
    if (++accumulated_ == setup_.spec.microbatches_per_step() && replica_sum_) replica_sum_->slots_done_from(0);
}

// The microbatch of the data that this replica's `microbatch` (counted as one replica's: m per iteration) is.
int64_t StageRunner::data_microbatch(int64_t microbatch) const {
    const int64_t m = o_.num_microbatches;
    return (microbatch / m) * o_.microbatches_per_iter() + replica_ * m + microbatch % m;
}

// ---- the optimizer step ----

bool StageRunner::optimizer_step(const Action& a) {
    if (!step_begun_) {
        if (replica_sum_ && replica_sum_->in_flight()) {
            if (!replica_sum_->try_finish()) {
                meter_.blocked_on_replicas();
                return false;
            }
            meter_.replicas_arrived();
        }
        begin_step(a);
    }
    if (!weights_pending_) {
        const std::optional<double> norm = clip_norm(a);
        if (!norm) return false;  // waiting for the other stages' sums of squares
        finish_step(a, *norm);
    }
    if (weights_pending_) {  // the distributed optimizer: the other owners' updated tensors
        if (!shards_->try_take_weights(state_.master)) {
            meter_.blocked_on_replicas();
            return false;
        }
        meter_.replicas_arrived();
        weights_pending_ = false;
    }
    complete_step(a);
    return true;
}

// The gradient of the step is complete: average it and contribute to the norm.
void StageRunner::begin_step(const Action& a) {
    const int64_t n = setup_.spec.microbatches_per_step();
    if (accumulated_ != n)
        throw std::logic_error(fmt::format("optimizer step {} after {} backwards, not {}", a.step, accumulated_, n));
    average_grads(ops_, state_.model.layout(), state_.grads, n * o_.data_parallel_size);
    step_sums_ = param_sum_squares(ops_, state_.model.layout(), state_.grads);
    if (o_.clip_scope == ClipScope::global)
        transport_.start_allgather({Channel::clip_sums, a.step}, step_sums_, setup_.param_tensor_counts());
    step_begun_ = true;
}

// --clip-scope global: the norm over every stage, from all of their per-parameter sums in canonical order
// (the same bits on every stage, and the bits of the unsplit model); stage: this stage's own norm.
std::optional<double> StageRunner::clip_norm(const Action& a) {
    if (o_.clip_scope != ClipScope::global) return std::sqrt(total_sum_squares({step_sums_}));
    std::optional<std::vector<std::vector<double>>> all = transport_.try_take_allgather({Channel::clip_sums, a.step});
    if (!all) return std::nullopt;
    return std::sqrt(total_sum_squares(*all));
}

// Clip, then the optimizer on the tensors this stage steps (all, or with the distributed optimizer the owned ones,
// whose updated weights then go to the other replicas).
void StageRunner::finish_step(const Action& a, double norm) {
    clip_grads_to_norm(ops_, state_.model.layout(), state_.grads, norm, o_.clip_grad);
    const double lr = lr_.lr_at(a.step);
    TensorSet master = state_.optimizer_view(state_.master), grads = state_.optimizer_view(state_.grads);
    // Taylor's compensation reads the stale version the gradient came from; it is let go before the update so
    // that the stage never holds more versions than its schedule needs.
    const std::optional<int64_t> stale = versions_.stale_version_of_step(a.step);
    if (stale) {
        const TensorSet stale_weights = state_.optimizer_view(versions_.at(*stale));
        state_.optimizer.compensate(ops_, state_.optimizer_layout, master, grads, &stale_weights);
        versions_.release(*stale);
    }
    die_if_asked(KillPoint::optimizer, a.step);
    versions_.before_update();
    state_.optimizer.update(ops_, state_.optimizer_layout, master, grads, static_cast<float>(lr),
                            !setup_.spec.is_synchronous_step(a.step));
    if (shards_) {
        shards_->start_weights(a.step, state_.master);
        weights_pending_ = true;
    }
}

// The step's weights are whole: the next version, and the gradient sum starts over.
void StageRunner::complete_step(const Action& a) {
    versions_.after_update(a.version);
    state_.grads.zero();
    accumulated_ = 0;
    step_begun_ = false;
    reported_sums_ = std::move(step_sums_);
    step_sums_.clear();
}

// The stage's whole optimizer state in canonical order (for its file and its hash): its own, or with the
// distributed optimizer, on replica 0 once the other owners' tensors have come (`key` names the gather).
std::optional<std::vector<std::pair<std::string, const Tensor*>>> StageRunner::whole_optimizer_state(int64_t key) {
    const std::vector<std::pair<std::string, Tensor*>> mine = state_.optimizer.state_tensors();
    if (!shards_) return std::vector<std::pair<std::string, const Tensor*>>(mine.begin(), mine.end());
    return shards_->try_gather_state(key, mine);
}

// ---- evaluation, reports, the end ----

// One validation microbatch through this stage, forward only, with the newest weights. The validation
// loader starts over with the first one, as validation_loss (train_data.h) does.
bool StageRunner::evaluate(const StageTask& task) {
    Tensor x;
    if (!first_) {
        std::optional<Tensor> in = transport_.try_take(stage_ - 1, {Channel::eval_activation, task.eval_index});
        if (!in) return false;
        x = std::move(*in);
    }
    if (task.eval_position == 0) {
        data_->val->reset();
        val_loss_sum_ = 0;
        evaluated_iteration_ = task.iteration;
    }
    const Microbatch batch = val_reader_.next(*data_->val, ops_.device());
    LayerContext ctx{ops_, versions_.newest(), nullptr, batch};
    Tensor y = stage_forward(state_.model, ctx, x, nullptr);
    if (last_)
        val_loss_sum_ += y.f32()[0];
    else
        transport_.send(stage_ + 1, {Channel::eval_activation, task.eval_index}, y);
    return true;
}

// The stage's report on the iteration. With replicas, replica r > 0 sends its own to replica 0, which adds every
// replica's loss sum and MoE loads onto its own in replica order (as the oracle does) and reports for them all.
bool StageRunner::report(const StageTask& task) {
    if (!pending_report_) {
        StageReport& r = pending_report_.emplace();
        r.iteration = task.iteration;
        r.sum_squares = reported_sums_;
        if (auto moe = moe_loads_.extract(task.iteration)) r.moe = moe.mapped().blocks();
        meter_.take_report(r);
        if (last_) {
            r.loss_sum = loss_sums_[task.iteration];
            loss_sums_.erase(task.iteration);
            if (evaluated_iteration_ == task.iteration) r.val_loss_sum = val_loss_sum_;
        }
        if (replica_ > 0) {
            replicas_->send_values(0, replica_report_tag(task.iteration), r.to_values());
            pending_report_.reset();
            return true;
        }
        post_replica_reports(task.iteration);
    }
    StageReport& r = *pending_report_;
    if (!merge_replica_reports(r)) return false;
    if (last_) {
        IterationReport line;
        line.iteration = task.iteration + 1;
        line.loss = *r.loss_sum / static_cast<double>(o_.microbatches_per_iter());
        apply_nan_policy(line, o_.stop_on_nan);  // here, before the report: the error names this stage
    }
    transport_.send_values(0, {Channel::report, task.iteration}, r.to_values());
    pending_report_.reset();
    return true;
}

// A rank's chunks are stages of their own: the tag names the stage too.
MessageTag StageRunner::replica_report_tag(int64_t iteration) const {
    return {Channel::replica_report, iteration * setup_.num_stages() + stage_};
}

void StageRunner::post_replica_reports(int64_t iteration) {
    if (!replicas_) return;
    const ModelConfig& model = o_.model;
    const size_t most = StageReport::max_values(state_.model.layout().size(), moe_block_count(model, state_.model.spec()),
                                                model.moe.num_experts);
    replica_reports_.assign(static_cast<size_t>(o_.data_parallel_size), std::nullopt);
    for (int r = 1; r < o_.data_parallel_size; ++r)
        replicas_->post_recv_values(r, replica_report_tag(iteration), most);
}

// Replica 0: once every other replica's report on the iteration has come, their loss sums and MoE loads onto
// `r`'s, in replica order.
bool StageRunner::merge_replica_reports(StageReport& r) {
    if (!replicas_) return true;
    bool all = true;
    for (int q = 1; q < o_.data_parallel_size; ++q) {
        auto& got = replica_reports_[static_cast<size_t>(q)];
        if (!got) got = replicas_->try_take_values(q, replica_report_tag(r.iteration));
        all &= got.has_value();
    }
    if (!all) return false;
    for (int q = 1; q < o_.data_parallel_size; ++q) {
        const StageReport other = StageReport::from_values(*replica_reports_[static_cast<size_t>(q)]);
        if (r.loss_sum) *r.loss_sum += other.loss_sum.value_or(0);
        add_replica_loads(r.moe, other.moe);
    }
    replica_reports_.clear();
    return true;
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
        if (shards_) shards_->send_state(step, state_.optimizer.state_tensors());
        return true;
    }
    const std::optional<std::vector<std::pair<std::string, const Tensor*>>> state = whole_optimizer_state(step);
    if (!state) return false;  // the other owners' state is on its way
    std::vector<std::pair<std::string, const Tensor*>> carried;
    const ParamLayout& layout = state_.model.layout();
    for (int i = 0; i < layout.size(); ++i) carried.emplace_back("weights." + layout[i].name, &state_.master[i]);
    carried.insert(carried.end(), state->begin(), state->end());
    const std::string dir = make_staging_dir(o_.save_dir, step);
    const SafetensorsPieces file = stage_state_pieces(carried, layout, versions_.older_versions());
    if (kill_asked(KillPoint::checkpoint) && setup_.iteration_of_step(o_.kill_at_step) <= task.iteration)
        die_writing_half(dir + "/" + stage_file_name(stage_), file.joined());
    const CheckpointEntry entry = write_checkpoint_file(dir, stage_file_name(stage_), file.pieces());
    const LoaderPosition data = data_->train->position_after(step * o_.microbatches_per_iter() * o_.micro_batch_size);
    const CheckpointReport r{entry.bytes, state_.optimizer.steps_taken(), data.epoch, data.index, entry.sha256,
                             static_cast<double>(meter_.now_ns()) * 1e-9};
    transport_.send_values(0, {Channel::checkpoint, step}, r.to_values());
    return true;
}

// To stage 0: the master weights, the optimizer state (both hashed there, pipeline/stage/state_hash.h), the final
// values and, with --trace, the timed records. Every stop vote started is taken first (MPI wants every
// collective completed).
bool StageRunner::finish() {
    if (!vote_.drain(transport_)) return false;
    if (!replicas_agree()) return false;
    const int64_t key = setup_.end_iteration + 1;  // after every checkpoint's gather
    if (replica_ > 0) {  // replica 0 sends for the stage
        if (shards_) shards_->send_state(key, state_.optimizer.state_tensors());
        return true;
    }
    const std::optional<std::vector<std::pair<std::string, const Tensor*>>> state = whole_optimizer_state(key);
    if (!state) return false;
    for (int i = 0; i < state_.master.size(); ++i) transport_.send(0, {Channel::final_weights, i}, state_.master[i]);
    for (size_t i = 0; i < state->size(); ++i)
        transport_.send(0, {Channel::final_optimizer, static_cast<int64_t>(i)}, *(*state)[i].second);
    StageFinal f;
    f.peak_versions = versions_.peak_held();
    std::optional<std::vector<double>> trace = meter_.finish(f);
    transport_.send_values(0, {Channel::final_values, 0}, f.to_values());
    if (trace) transport_.send_values(0, {Channel::trace, 0}, std::move(*trace));
    return true;
}

// With replicas, at the end: every replica's master weights must be replica 0's, bit for bit (they took the same
// summed gradients); each sends the sha256 of its weights to replica 0, which checks them (std::logic_error).
bool StageRunner::replicas_agree() {
    if (!replicas_ || replicas_agreed_) return true;
    const MessageTag tag = replica_report_tag(setup_.end_iteration);  // after every iteration's report
    const std::string mine = stages_sha256({state_.master.tensors});
    if (replica_ > 0) {
        std::vector<double> digits(mine.begin(), mine.end());
        replicas_->send_values(0, tag, std::move(digits));
        replicas_agreed_ = true;
        return true;
    }
    if (replica_reports_.empty()) {
        replica_reports_.assign(static_cast<size_t>(o_.data_parallel_size), std::nullopt);
        for (int q = 1; q < o_.data_parallel_size; ++q) replicas_->post_recv_values(q, tag, mine.size());
    }
    bool all = true;
    for (int q = 1; q < o_.data_parallel_size; ++q) {
        auto& got = replica_reports_[static_cast<size_t>(q)];
        if (!got) got = replicas_->try_take_values(q, tag);
        all &= got.has_value();
    }
    if (!all) return false;
    for (int q = 1; q < o_.data_parallel_size; ++q) {
        const std::string theirs(replica_reports_[static_cast<size_t>(q)]->begin(),
                                 replica_reports_[static_cast<size_t>(q)]->end());
        if (theirs != mine)
            throw std::logic_error(fmt::format("stage {}: replica {}'s weights differ from replica 0's at the end",
                                               stage_, q));
    }
    replica_reports_.clear();
    replicas_agreed_ = true;
    return true;
}

}  // namespace nb

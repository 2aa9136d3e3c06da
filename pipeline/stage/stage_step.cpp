#include "pipeline/stage/stage_step.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "model/model_step.h"
#include "model/tied_head_grad.h"
#include "optim/grad_clip.h"
#include "optim/optimizer_shards.h"

namespace nb {

namespace {

// --use-distributed-optimizer with replicas: who owns each tensor of the stage (optim/optimizer_shards.h).
// The most tensors any stage's layout has, and one more (a stage holding both tied ends has a gradient slot more:
// model/tied_head_grad.h): the replica channels' tags are dense in them.
int64_t most_tensors(const PipelineSetup& setup) {
    int64_t most = 1;
    for (const ParamLayout& l : setup.layouts) most = std::max<int64_t>(most, l.size());
    return most + 1;
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

std::unique_ptr<ReplicaSum> replica_sum_of(const PipelineSetup& setup, int stage, Transport* replicas,
                                           std::unique_ptr<ReplicaSum> given) {
    if (!replicas) return nullptr;
    if (given) return given;
    return std::make_unique<ReplicaGradSum>(*replicas, stage, setup.num_stages(), most_tensors(setup));
}

std::unique_ptr<ShardExchange> shard_exchange_of(const PipelineSetup& setup, int stage, Transport* replicas,
                                                 const std::vector<TensorShard>& plan) {
    if (plan.empty()) return nullptr;
    const TrainOptions& o = setup.options;
    const ParamLayout& layout = setup.layouts.at(static_cast<size_t>(stage));
    return std::make_unique<ShardExchange>(*replicas, stage, setup.num_stages(), layout, plan,
                                           stage_optimizer_state_entries(o.optimizer, o.delay_fix, layout, o.lr.lr),
                                           shard_tag_stride(setup));
}

}  // namespace

// The step's last backward (or W) tells the replica sum, layer by layer, which gradient slots are final, so that
// each bucket is on its way while the layers before it still compute (Megatron's --overlap-grad-reduce).
class StageStep::ReplicaSumFeed final : public GradsDoneObserver {
public:
    explicit ReplicaSumFeed(ReplicaSum& sum) : sum_(sum) {}
    void grads_done_from(int first_param) override { sum_.slots_done_from(first_param); }

private:
    ReplicaSum& sum_;
};

StageStep::StageStep(const PipelineSetup& setup, int stage, Transport& transport, Ops& ops, Transport* replicas,
                     std::unique_ptr<ReplicaSum> replica_sum, StageMeter& meter, const FaultPlan& faults)
    : setup_(setup),
      o_(setup.options),
      transport_(transport),
      ops_(ops),
      meter_(meter),
      faults_(faults),
      replica_sum_(replica_sum_of(setup, stage, replicas, std::move(replica_sum))),
      feed_(replica_sum_ ? std::make_unique<ReplicaSumFeed>(*replica_sum_) : nullptr),
      shard_plan_(distributed_shards(setup, stage, replicas)),
      state_(shard_plan_.empty() ? StageState(o_, setup.cut[static_cast<size_t>(stage)], ops.device())
                                 : StageState(o_, setup.cut[static_cast<size_t>(stage)], ops.device(),
                                              owned_shards(shard_plan_, replicas->stage()))),
      shards_(shard_exchange_of(setup, stage, replicas, shard_plan_)),
      lr_(o_.lr, setup.spec.optimizer_steps()),
      tied_(setup, stage, transport, ops) {}

StageStep::~StageStep() = default;

// With replicas, the backward (or W) that adds the step's last gradient begins their sum and feeds it: the sum
// runs on while the stage goes on with its list up to the step (sends, the next forwards), which waits for it.
GradsDoneObserver* StageStep::replica_observer(int64_t step) {
    if (!replica_sum_ || accumulated_ + 1 != setup_.spec.microbatches_per_step()) return nullptr;
    replica_sum_->begin(step, state_.grads.tensors);
    return feed_.get();
}

// After the step's last gradient, every bucket of the replica sum has started (slots_done_from(0) again: a no-op
// that fails loudly if the sum was never begun).
void StageStep::gradient_added() {
    if (++accumulated_ == setup_.spec.microbatches_per_step() && replica_sum_) replica_sum_->slots_done_from(0);
}

bool StageStep::try_step(const Action& a, WeightVersions& versions) {
    if (!begun_) {
        if (!replicas_summed() || !tied_halves_added(a)) return false;
        begin(a);
    }
    if (!weights_pending_) {
        const std::optional<double> norm = clip_norm(a);
        if (!norm) return false;  // waiting for the other stages' sums of squares
        std::optional<double> tied_norm = norm;
        if (tied_.needs_first_norm()) tied_norm = tied_.try_take_norm(a.step);
        if (!tied_norm) return false;  // waiting for the first stage's norm, for the tied copy
        // By the step's norm; a tied copy under --clip-scope stage by the first stage's, as there.
        clip_grads_to_norms(ops_, state_.model.layout(), state_.grads, *norm, *tied_norm, o_.clip_grad);
        update(a, versions);
    }
    if (weights_pending_) {  // the distributed optimizer: the other owners' updated tensors
        if (!shards_->try_take_weights(state_.master)) {
            meter_.blocked_on_replicas();
            return false;
        }
        meter_.replicas_arrived();
        weights_pending_ = false;
    }
    complete(a, versions);
    return true;
}

bool StageStep::replicas_summed() {
    if (!replica_sum_ || !replica_sum_->in_flight()) return true;
    if (!replica_sum_->try_finish()) {
        meter_.blocked_on_replicas();
        return false;
    }
    meter_.replicas_arrived();
    return true;
}

// Tied embeddings, the first or the last of several stages: its half to the other end, then the other's onto it.
bool StageStep::tied_halves_added(const Action& a) {
    if (!tied_.active()) return true;
    if (!tied_sent_) tied_.start(a.step, state_.grads[0], state_.master[0]);
    tied_sent_ = true;
    if (!tied_.try_add(a.step, state_.grads[0])) return false;
    tied_sent_ = false;
    return true;
}

std::optional<std::string> StageStep::waits_for() const {
    if (replica_sum_ && replica_sum_->in_flight()) return replica_sum_->waits_for();
    if (tied_sent_ || (norm_ && tied_.needs_first_norm() && !weights_pending_)) return tied_.waits_for();
    if (weights_pending_) return shards_->waits_for();
    if (begun_) return "the all-gather of every stage's clip sums (--clip-scope global)";
    return std::nullopt;
}

// The gradient of the step is complete: average it and contribute to the norm.
void StageStep::begin(const Action& a) {
    const int64_t n = setup_.spec.microbatches_per_step();
    if (accumulated_ != n)
        throw std::logic_error(fmt::format("optimizer step {} after {} backwards, not {}", a.step, accumulated_, n));
    add_tied_head_half(ops_, state_.model, state_.grads);  // a stage holding both tied ends: g = E + H
    average_grads(ops_, state_.model.layout(), state_.grads, n * o_.data_parallel_size);
    step_sums_ = param_sum_squares(ops_, state_.model.layout(), state_.grads);
    if (tied_.holds_copy()) step_sums_.at(0) = 0;  // the tied matrix counts once, on the first stage
    if (o_.clip_scope == ClipScope::global)
        transport_.start_allgather({Channel::clip_sums, a.step}, step_sums_, setup_.param_tensor_counts());
    begun_ = true;
}

// --clip-scope global: the norm over every stage, from all of their per-parameter sums in canonical order
// (the same bits on every stage, and the bits of the unsplit model); stage: this stage's own norm.
// With a tied copy under --clip-scope stage: the first stage sends its norm to the last, which waits for it.
std::optional<double> StageStep::clip_norm(const Action& a) {
    if (!norm_) {
        if (o_.clip_scope != ClipScope::global) {
            norm_ = std::sqrt(total_sum_squares({step_sums_}));
            if (tied_.sends_norm()) tied_.send_norm(a.step, *norm_);
        } else {
            std::optional<std::vector<std::vector<double>>> all =
                transport_.try_take_allgather({Channel::clip_sums, a.step});
            if (!all) return std::nullopt;
            norm_ = std::sqrt(total_sum_squares(*all));
        }
    }
    return norm_;
}

// The optimizer on the tensors this stage steps (all, or with the distributed optimizer the owned ones,
// whose updated weights then go to the other replicas).
void StageStep::update(const Action& a, WeightVersions& versions) {
    const double lr = lr_.lr_at(a.step);
    TensorSet master = state_.optimizer_view(state_.master), grads = state_.optimizer_view(state_.grads);
    // Taylor's compensation reads the stale version the gradient came from; it is let go before the update so
    // that the stage never holds more versions than its schedule needs.
    const std::optional<int64_t> stale = versions.stale_version_of_step(a.step);
    if (stale) {
        const TensorSet stale_weights = state_.optimizer_view(versions.at(*stale));
        state_.optimizer.compensate(ops_, state_.optimizer_layout, master, grads, &stale_weights);
        versions.release(*stale);
    }
    faults_.die_if_asked(KillPoint::optimizer, a.step);
    versions.before_update();
    state_.optimizer.update(ops_, state_.optimizer_layout, master, grads, static_cast<float>(lr),
                            !setup_.spec.is_synchronous_step(a.step));
    if (shards_) {
        shards_->start_weights(a.step, state_.master);
        weights_pending_ = true;
    }
}

// The step's weights are whole: the next version, and the gradient sum starts over.
void StageStep::complete(const Action& a, WeightVersions& versions) {
    versions.after_update(a.version);
    state_.grads.zero();
    accumulated_ = 0;
    begun_ = false;
    norm_.reset();
    reported_sums_ = std::move(step_sums_);
    step_sums_.clear();
}

std::optional<std::vector<std::pair<std::string, const Tensor*>>> StageStep::whole_optimizer_state(int64_t key) {
    const std::vector<std::pair<std::string, Tensor*>> mine = state_.optimizer.state_tensors();
    if (!shards_) return std::vector<std::pair<std::string, const Tensor*>>(mine.begin(), mine.end());
    return shards_->try_gather_state(key, mine);
}

void StageStep::send_state(int64_t key) {
    if (shards_) shards_->send_state(key, state_.optimizer.state_tensors());
}

}  // namespace nb

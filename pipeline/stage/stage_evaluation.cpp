#include "pipeline/stage/stage_evaluation.h"

#include <stdexcept>
#include <string>

#include <fmt/format.h>

#include "model/model_step.h"
#include "pipeline/stage/state_hash.h"
#include "src/plan/train_progress.h"

namespace nb {

StageEvaluation::StageEvaluation(const PipelineSetup& setup, int stage, Transport& transport, Ops& ops,
                                 Transport* replicas, const StageModel& model, BatchLoader* val, StageMeter& meter)
    : setup_(setup),
      stage_(stage),
      transport_(transport),
      ops_(ops),
      replicas_(replicas),
      replica_(replicas ? replicas->stage() : 0),
      model_(model),
      val_(val),
      meter_(meter),
      val_reader_(setup.options) {}

// One validation microbatch through this stage, forward only, with the newest weights. The validation
// loader starts over with the first one, as validation_loss (train_data.h) does.
bool StageEvaluation::evaluate(const StageTask& task, const TensorSet& weights) {
    Tensor x;
    if (!first()) {
        std::optional<Tensor> in = transport_.try_take(stage_ - 1, {Channel::eval_activation, task.eval_index});
        if (!in) return false;
        x = std::move(*in);
    }
    if (task.eval_position == 0) {
        val_->reset();
        val_loss_sum_ = 0;
        evaluated_iteration_ = task.iteration;
    }
    const Microbatch batch = val_reader_.next(*val_, ops_.device());
    LayerContext ctx{ops_, weights, nullptr, batch};
    Tensor y = stage_forward(model_, ctx, x, nullptr);
    if (last())
        val_loss_sum_ += y.f32()[0];
    else
        transport_.send(stage_ + 1, {Channel::eval_activation, task.eval_index}, y);
    return true;
}

bool StageEvaluation::report(const StageTask& task, const std::vector<double>& sum_squares) {
    if (!pending_report_) {
        StageReport& r = pending_report_.emplace();
        r.iteration = task.iteration;
        r.sum_squares = sum_squares;
        if (auto moe = moe_loads_.extract(task.iteration)) r.moe = moe.mapped().blocks();
        meter_.take_report(r);
        if (last()) {
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
    if (last()) {
        IterationReport line;
        line.iteration = task.iteration + 1;
        line.loss = *r.loss_sum / static_cast<double>(options().microbatches_per_iter());
        apply_nan_policy(line, options().stop_on_nan);  // here, before the report: the error names this stage
    }
    transport_.send_values(0, {Channel::report, task.iteration}, r.to_values());
    pending_report_.reset();
    return true;
}

// A rank's chunks are stages of their own: the tag names the stage too.
MessageTag StageEvaluation::replica_report_tag(int64_t iteration) const {
    return {Channel::replica_report, iteration * setup_.num_stages() + stage_};
}

void StageEvaluation::post_replica_reports(int64_t iteration) {
    if (!replicas_) return;
    const ModelConfig& model = options().model;
    const size_t most = StageReport::max_values(model_.layout().size(), moe_block_count(model, model_.spec()),
                                                model.moe.num_experts);
    replica_reports_.assign(static_cast<size_t>(options().data_parallel_size), std::nullopt);
    for (int r = 1; r < options().data_parallel_size; ++r)
        replicas_->post_recv_values(r, replica_report_tag(iteration), most);
}

// Replica 0: once every other replica's report on the iteration has come, their loss sums and MoE loads onto
// `r`'s, in replica order.
bool StageEvaluation::merge_replica_reports(StageReport& r) {
    if (!replicas_) return true;
    bool all = true;
    for (int q = 1; q < options().data_parallel_size; ++q) {
        auto& got = replica_reports_[static_cast<size_t>(q)];
        if (!got) got = replicas_->try_take_values(q, replica_report_tag(r.iteration));
        all &= got.has_value();
    }
    if (!all) return false;
    for (int q = 1; q < options().data_parallel_size; ++q) {
        const StageReport other = StageReport::from_values(*replica_reports_[static_cast<size_t>(q)]);
        if (r.loss_sum) *r.loss_sum += other.loss_sum.value_or(0);
        add_replica_loads(r.moe, other.moe);
    }
    replica_reports_.clear();
    return true;
}

// Each replica sends the sha256 of its weights to replica 0, which checks them (std::logic_error): they took the
// same summed gradients.
bool StageEvaluation::replicas_agree(const TensorSet& master) {
    if (!replicas_ || replicas_agreed_) return true;
    const MessageTag tag = replica_report_tag(setup_.end_iteration);  // after every iteration's report
    const std::string mine = stages_sha256({master.tensors});
    if (replica_ > 0) {
        std::vector<double> digits(mine.begin(), mine.end());
        replicas_->send_values(0, tag, std::move(digits));
        replicas_agreed_ = true;
        return true;
    }
    if (replica_reports_.empty()) {
        replica_reports_.assign(static_cast<size_t>(options().data_parallel_size), std::nullopt);
        for (int q = 1; q < options().data_parallel_size; ++q) replicas_->post_recv_values(q, tag, mine.size());
    }
    bool all = true;
    for (int q = 1; q < options().data_parallel_size; ++q) {
        auto& got = replica_reports_[static_cast<size_t>(q)];
        if (!got) got = replicas_->try_take_values(q, tag);
        all &= got.has_value();
    }
    if (!all) return false;
    for (int q = 1; q < options().data_parallel_size; ++q) {
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

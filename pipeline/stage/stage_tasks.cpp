#include "pipeline/stage/stage_tasks.h"

#include <fmt/format.h>

#include "src/plan/train_data.h"

namespace nb {

std::string describe(const StageTask& task) {
    switch (task.kind) {
        case StageTask::Kind::action: return describe(task.action);
        case StageTask::Kind::evaluate:
            return fmt::format("evaluation forward {} after iteration {}", task.eval_position, task.iteration);
        case StageTask::Kind::report: return fmt::format("report on iteration {}", task.iteration);
        case StageTask::Kind::vote: return fmt::format("stop vote after iteration {}", task.iteration);
        case StageTask::Kind::save: return fmt::format("checkpoint after iteration {}", task.iteration);
        case StageTask::Kind::finish: return "final weights to stage 0";
    }
    return "?";
}

int64_t iteration_of(const PipelineSetup& setup, const StageTask& task) {
    switch (task.kind) {
        case StageTask::Kind::action: return setup.iteration_of_step(task.action.step);
        case StageTask::Kind::finish: return -1;
        default: return task.iteration;
    }
}

namespace {

// The evaluations of iterations [0, iteration): those that are multiples of --eval-interval, and the run's last.
int64_t evaluations_before(const TrainOptions& o, int64_t iteration) {
    int64_t due = o.eval_interval > 0 ? iteration / o.eval_interval : 0;
    const bool last_counted = o.eval_interval > 0 && o.train_iters % o.eval_interval == 0;
    if (o.train_iters <= iteration && !last_counted) ++due;
    return due;
}

}  // namespace

StageTasks::StageTasks(const PipelineSetup& setup, int stage, bool evaluates)
    : setup_(setup),
      actions_(setup.stage_actions(stage)),
      evaluates_(evaluates),
      saves_(!setup.options.save_dir.empty()),
      eval_count_(setup.options.eval_iters * setup.options.microbatches_per_iter()),  // as validation_loss
      // A resumed run counts the evaluation forwards before it too.
      eval_index_(evaluates ? evaluations_before(setup.options, setup.first_iteration) * eval_count_ : 0) {}

std::optional<StageTask> StageTasks::next() {
    if (after_step_.empty()) {
        if (const std::optional<Action> a = actions_->next()) {
            if (a->type == ActionType::optimizer_step && setup_.ends_iteration(a->step))
                add_iteration_end(setup_.iteration_of_step(a->step));
            return StageTask{StageTask::Kind::action, *a};
        }
        if (finished_) return std::nullopt;
        finished_ = true;
        return StageTask{StageTask::Kind::finish};
    }
    StageTask task = after_step_.front();
    after_step_.pop_front();
    return task;
}

void StageTasks::add_iteration_end(int64_t t) {
    if (evaluates_ && evaluation_due(setup_.options, t))
        for (int64_t j = 0; j < eval_count_; ++j)
            after_step_.push_back({StageTask::Kind::evaluate, Action{}, t, eval_index_++, j});
    after_step_.push_back({StageTask::Kind::report, Action{}, t});
    if (saves_) {
        after_step_.push_back({StageTask::Kind::vote, Action{}, t});
        after_step_.push_back({StageTask::Kind::save, Action{}, t});
    }
}

void StageTasks::end_before_iteration(int64_t iteration) {
    actions_->end_before_step(iteration * setup_.steps_per_iteration());
    std::erase_if(after_step_, [&](const StageTask& t) { return t.iteration >= iteration; });
}

std::vector<StageTask> stage_tasks(const PipelineSetup& setup, int stage, bool evaluates) {
    StageTasks tasks(setup, stage, evaluates);
    std::vector<StageTask> all;
    while (std::optional<StageTask> t = tasks.next()) all.push_back(*t);
    return all;
}

}  // namespace nb

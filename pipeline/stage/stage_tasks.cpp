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

std::vector<StageTask> stage_tasks(const PipelineSetup& setup, int stage, bool evaluates) {
    const TrainOptions& o = setup.options;
    const int64_t eval_count = o.eval_iters * o.microbatches_per_iter();  // as validation_loss (train_data.h)
    const bool saves = !o.save_dir.empty();
    std::vector<StageTask> tasks;
    // Evaluation forwards are numbered over the whole run (their message tags), so a resumed run counts the
    // evaluations before it too.
    int64_t eval_index = 0;
    for (int64_t t = 0; t < setup.first_iteration; ++t)
        if (evaluates && evaluation_due(o, t)) eval_index += eval_count;
    for (const Action& a : setup.plans.at(static_cast<size_t>(stage))) {
        if (setup.iteration_of_step(a.step) >= setup.end_iteration) continue;
        tasks.push_back({StageTask::Kind::action, a});
        if (a.type != ActionType::optimizer_step || !setup.ends_iteration(a.step)) continue;
        const int64_t t = setup.iteration_of_step(a.step);
        if (evaluates && evaluation_due(o, t))
            for (int64_t j = 0; j < eval_count; ++j)
                tasks.push_back({StageTask::Kind::evaluate, Action{}, t, eval_index++, j});
        tasks.push_back({StageTask::Kind::report, Action{}, t});
        if (saves) {
            tasks.push_back({StageTask::Kind::vote, Action{}, t});
            tasks.push_back({StageTask::Kind::save, Action{}, t});
        }
    }
    tasks.push_back({StageTask::Kind::finish});
    return tasks;
}

}  // namespace nb

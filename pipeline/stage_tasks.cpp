#include "pipeline/stage_tasks.h"

#include <fmt/format.h>

#include "src/plan/train_data.h"

namespace nb {

std::string describe(const StageTask& task) {
    switch (task.kind) {
        case StageTask::Kind::action: return describe(task.action);
        case StageTask::Kind::evaluate:
            return fmt::format("evaluation forward {} after iteration {}", task.eval_position, task.iteration);
        case StageTask::Kind::report: return fmt::format("report on iteration {}", task.iteration);
        case StageTask::Kind::finish: return "final weights to stage 0";
    }
    return "?";
}

std::vector<StageTask> stage_tasks(const PipelineSetup& setup, int stage, bool evaluates) {
    const TrainOptions& o = setup.options;
    const int64_t eval_count = o.eval_iters * o.num_microbatches;  // as validation_loss (train_data.h)
    std::vector<StageTask> tasks;
    int64_t eval_index = 0;
    for (const Action& a : setup.plans.at(static_cast<size_t>(stage))) {
        tasks.push_back({StageTask::Kind::action, a});
        if (a.type != ActionType::optimizer_step || !setup.ends_iteration(a.step)) continue;
        const int64_t t = setup.iteration_of_step(a.step);
        if (evaluates && evaluation_due(o, t))
            for (int64_t j = 0; j < eval_count; ++j)
                tasks.push_back({StageTask::Kind::evaluate, Action{}, t, eval_index++, j});
        tasks.push_back({StageTask::Kind::report, Action{}, t});
    }
    tasks.push_back({StageTask::Kind::finish});
    return tasks;
}

}  // namespace nb

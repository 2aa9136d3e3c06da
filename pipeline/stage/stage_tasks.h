// What one stage's runner does, in order: its actions from the schedule (pipeline/schedule/schedule.h), plus what the
// schedule leaves to the runtime, each placed where the stage's weights are the ones it needs:
//   evaluate  after the optimizer step that ends an iteration which validates (evaluation_due), the forward of
//             one validation microbatch with the stage's newest weights (= W after that iteration, as the
//             oracle evaluates); the stage's next update comes only after all of them
//   report    after that, the stage's report on the iteration to stage 0 (pipeline/stage/stage_report.h)
//   vote      with --save: the stage's stop vote on the iteration (pipeline/stage/stop_vote.h)
//   save      with --save: the stage's checkpoint file of the iteration, when the iteration is a save point or
//             the run's last (the runner decides: an agreed stop makes a last one); its state is the state after
//             the stage's update that ended the iteration, since the tasks in between change none of it
//   finish    at the very end, the stage's master weights and final values to stage 0
// Only iterations [setup.first_iteration, setup.end_iteration) are there. They are made as the runner asks for
// them (StageTasks::next), never the whole run's at once: memory does not grow with --train-iters.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "pipeline/schedule/pipeline_setup.h"

namespace nb {

struct StageTask {
    enum class Kind { action, evaluate, report, vote, save, finish };
    Kind kind = Kind::action;
    Action action{};             // action: the schedule's action
    int64_t iteration = -1;      // evaluate, report, vote, save: the iteration (0-based) that has just ended
    int64_t eval_index = -1;     // evaluate: this evaluation forward, counted over the run (its message tag)
    int64_t eval_position = -1;  // evaluate: its place among the evaluation's microbatches (0: the first)
};
std::string describe(const StageTask& task);
// The iteration a task belongs to: its action's (by its optimizer step) or the one it follows; -1 for finish.
int64_t iteration_of(const PipelineSetup& setup, const StageTask& task);

// The tasks of `stage` in order: its actions (setup.stage_actions), with evaluations where `evaluates` (there is
// validation data), reports, with --save votes and saves, and the finish.
class StageTasks {
public:
    // `setup` must outlive it.
    StageTasks(const PipelineSetup& setup, int stage, bool evaluates);
    // The next task, or nullopt after the finish.
    std::optional<StageTask> next();
    // An agreed early stop: the tasks of iterations >= `iteration` are left out from now on (not the finish).
    void end_before_iteration(int64_t iteration);

private:
    void add_iteration_end(int64_t iteration);

    const PipelineSetup& setup_;
    std::unique_ptr<ActionSource> actions_;
    bool evaluates_, saves_;
    int64_t eval_count_;  // evaluation forwards per evaluation
    int64_t eval_index_;  // the next evaluation forward's number, counted over the whole run (its message tag)
    std::deque<StageTask> after_step_;  // made, not yet taken: what follows an iteration's last optimizer step
    bool finished_ = false;
};

// Every task of `stage`, in order (tests, and small runs).
std::vector<StageTask> stage_tasks(const PipelineSetup& setup, int stage, bool evaluates);

}  // namespace nb

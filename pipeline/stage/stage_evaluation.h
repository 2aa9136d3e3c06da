// StageEvaluation: what a pipeline stage computes for its reports (pipeline/stage/stage_report.h), for StageRunner
// (pipeline/stage/stage_runner.h), which runs the tasks:
//
//   training loss   the last stage adds each microbatch's loss onto its iteration's sum, in microbatch order;
//   MoE loads       each MoE block's loads of the iteration's training forwards (model/moe_load.h);
//   evaluation      one validation microbatch through the stage per evaluate task, forward only, with the newest
//                   weights; the last stage adds the losses in order (the loader starts over with the first);
//   reports         the stage's report on an iteration to stage 0; with D > 1 replicas, replica r > 0 sends its own
//                   to replica 0, which adds every replica's loss sum and MoE loads onto its own in replica order
//                   (as the oracle does) and reports for them all;
//   the end         with replicas, every replica's master weights must be replica 0's, bit for bit.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "model/moe_load.h"
#include "model/stage_model.h"
#include "pipeline/schedule/pipeline_setup.h"
#include "pipeline/stage/stage_meter.h"
#include "pipeline/stage/stage_report.h"
#include "pipeline/stage/stage_tasks.h"
#include "pipeline/transport/transport.h"
#include "src/plan/train_data.h"

namespace nb {

class StageEvaluation {
public:
    // `model`: the stage's slice; `val`: the validation data (null without it); `replicas`: the stage's replica
    // transport (null for D = 1). Everything given must outlive it.
    StageEvaluation(const PipelineSetup& setup, int stage, Transport& transport, Ops& ops, Transport* replicas,
                    const StageModel& model, BatchLoader* val, StageMeter& meter);

    // Last stage: a training microbatch's loss, onto its iteration's sum.
    void add_training_loss(int64_t iteration, double loss) { loss_sums_[iteration] += loss; }
    // The counter of the iteration's MoE loads, for its training forwards.
    MoeLoadCounter* moe_loads(int64_t iteration) { return &moe_loads_[iteration]; }

    // The evaluate task: false until its input (from the stage before) has come.
    bool evaluate(const StageTask& task, const TensorSet& weights);
    // The report task; `sum_squares`: per parameter, of the gradient of the iteration's last step. False while
    // replica 0 waits for the other replicas' reports.
    bool report(const StageTask& task, const std::vector<double>& sum_squares);
    // At the end, with replicas: whether every replica's `master` has been compared with replica 0's (false while
    // replica 0 waits for their hashes; std::logic_error where one differs).
    bool replicas_agree(const TensorSet& master);

private:
    const TrainOptions& options() const { return setup_.options; }
    MessageTag replica_report_tag(int64_t iteration) const;
    void post_replica_reports(int64_t iteration);
    bool merge_replica_reports(StageReport& r);

    bool first() const { return model_.spec().has_embedding; }
    bool last() const { return model_.spec().has_head; }

    const PipelineSetup& setup_;
    const int stage_;
    Transport& transport_;
    Ops& ops_;
    Transport* replicas_;
    const int replica_;
    const StageModel& model_;
    BatchLoader* val_;
    StageMeter& meter_;
    MicrobatchReader val_reader_;

    std::map<int64_t, double> loss_sums_;          // last stage: per iteration, microbatch losses added in order
    std::map<int64_t, MoeLoadCounter> moe_loads_;  // per iteration, the stage's MoE blocks' training forwards
    std::optional<StageReport> pending_report_;    // made, not yet sent (replica 0 waits for the others')
    std::vector<std::optional<std::vector<double>>> replica_reports_;  // replica 0: what the others sent
    bool replicas_agreed_ = false;                 // the end's check of the replicas' weights is done
    double val_loss_sum_ = 0;                      // last stage: the running evaluation
    std::optional<int64_t> evaluated_iteration_;   // last stage: the iteration whose evaluation val_loss_sum_ is
};

}  // namespace nb

// ProgressCollector: stage 0's (rank 0's) side of the stages' reports. It prints what `train` prints: the
// progress line and --metrics record of every iteration, once every stage has reported on it (in iteration
// order), and at the end gathers every stage's master weights and optimizer state for the `final weights sha256`
// and `final optimizer state sha256` lines (pipeline/stage/state_hash.h: canonical order, the oracle's), and with
// --trace every stage's timed records, which it writes as the trace file.
//
// The numbers are the oracle's bit for bit: the loss is the last stage's sum of microbatch losses over m, the
// grad_norm the square root of every stage's per-parameter sums of squares (of the iteration's last step) added
// in canonical order, the lr the schedule's at that step, the validation loss the last stage's sum over the
// evaluation's microbatch count. Timing is rank 0's wall clock between iterations completing. What the line adds
// for a pipeline (busy per stage, bubble, activation MiB per stage) is each stage's own measure over its own
// reports since the previous line (pipeline/stage/stage_clock.h): busy = its compute time / its wall time between its
// reports, bubble = 1 - sum of busy time / sum of wall time over the stages (= 1 - sum busy / (P * wall) when the
// stages' windows are equally long, as they are in a steady pipeline), act = the most bytes of live stashes.
#pragma once

#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "optim/lr_schedule.h"
#include "pipeline/schedule/pipeline_setup.h"
#include "pipeline/stage/stage_clock.h"
#include "pipeline/stage/stage_report.h"
#include "pipeline/stage/stop_vote.h"
#include "pipeline/transport/transport.h"
#include "src/run/run_log.h"

namespace nb {

// One iteration as measured: rank 0's wall time for it, and per stage its report's numbers.
struct IterationTiming {
    double seconds = 0;
    std::vector<double> busy_s, wall_s, act_peak_bytes;  // per stage
    std::vector<double> replica_wait_s;                  // per stage: waits for the replicas' gradient sum
};
// The same per rank: with chunks a rank's stages (placement.part(r, c) for each chunk c) share its time, so the rank
// is busy for the sum of theirs within the longest of their walls, and holds the sum of their stashes.
IterationTiming per_rank_timing(const IterationTiming& t, const StagePlacement& placement);

class ProgressCollector {
public:
    // `transport` is stage 0's endpoint, `vote` stage 0's runner's (where the stages agreed to stop: the
    // collector expects reports up to there, and posts no receive beyond what is known to run). Opens --metrics
    // (RuntimeError naming the file when it cannot; a resumed run's records after its checkpoint are dropped:
    // RunLog::resumed_at). `elapsed_before_s`: a resumed run's clock at its checkpoint (the iterations' elapsed_s
    // go on from it, or from the metrics file's last kept record when that is later: the last stage's wall times
    // added up).
    ProgressCollector(const PipelineSetup& setup, Transport& transport, const StopVote& vote, std::FILE* log,
                      double elapsed_before_s = 0);

    // Takes whatever has arrived and prints every iteration now complete; true when anything arrived.
    bool poll();
    bool done() const { return weights_hash_.has_value() && checkpoints_done(); }
    // What is still missing (for deadlock reports).
    std::string waiting_for() const;

    // Once done: the run's summary (steps, losses, tokens/s, the weights' hash) and each stage's peak versions.
    TrainSummary summary() const;
    const std::vector<int64_t>& peak_versions() const { return peak_versions_; }
    const std::string& optimizer_sha256() const { return optimizer_hash_; }
    const std::vector<StageFinal>& finals() const { return final_values_; }  // per stage
    const std::vector<IterationTiming>& iteration_timings() const { return timings_; }

    static constexpr int64_t kIterationsAhead = 2;  // report receives posted ahead

private:
    void post_reports_ahead();
    bool take_reports();
    void print_iteration(int64_t t, const std::vector<StageReport>& reports);
    void post_checkpoint_receives();
    void expect_checkpoint(int64_t step);  // posts the receive of every stage's report on its file of `step`
    bool take_checkpoints();
    void complete(int64_t step, std::vector<std::optional<CheckpointReport>>& reports);
    bool checkpoints_done() const;
    void post_final_receives();
    bool take_final();
    void finish_run();

    const PipelineSetup& setup_;
    Transport& transport_;
    const StopVote& vote_;
    std::FILE* log_;
    RunLog run_log_;
    double elapsed_before_s_;
    double elapsed_s_;  // at the newest iteration printed
    LrSchedule lr_;

    int64_t next_to_print_ = 0, posted_until_ = 0;
    std::map<int64_t, std::vector<std::optional<StageReport>>> reports_;  // by iteration, per stage

    // Checkpoints: by step, per stage, what its file is (stage_report.h); each completed in step order.
    std::map<int64_t, std::vector<std::optional<CheckpointReport>>> checkpoints_;
    int64_t checkpoints_posted_until_ = 0;  // iterations whose checkpoint receives are posted
    int64_t completed_checkpoint_ = -1;     // the newest step whose manifest is written
    bool stop_line_printed_ = false;

    bool final_posted_ = false;
    std::vector<std::vector<std::optional<Tensor>>> final_weights_;  // per stage, per parameter
    std::vector<std::vector<std::optional<Tensor>>> final_state_;    // per stage, per optimizer state tensor
    std::vector<std::optional<StageFinal>> finals_;
    std::vector<std::optional<std::vector<TimedTask>>> traces_;     // per stage, with --trace
    std::vector<bool> trace_posted_;
    std::vector<int64_t> peak_versions_;
    std::vector<StageFinal> final_values_;
    std::optional<std::string> weights_hash_;
    std::string optimizer_hash_;

    IterationTiming since_line_;  // summed over the iterations since the last progress line (act: the most)
    std::vector<IterationTiming> timings_;
};

// The first line of a pipeline run: schedule, stages and their cut, model, data.
void print_pipeline_header(std::FILE* log, const PipelineSetup& setup, const char* where, Device device,
                           int64_t train_windows);

}  // namespace nb

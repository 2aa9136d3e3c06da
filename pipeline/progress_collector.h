// ProgressCollector: stage 0's (rank 0's) side of the stages' reports. It prints what `train` prints: the
// progress line and --metrics record of every iteration, once every stage has reported on it (in iteration
// order), and at the end gathers every stage's master weights for the `final weights sha256` line, hashed in
// canonical order (stage 0's parameters in layout order, then stage 1's, ...: the order of the unsplit model).
//
// The numbers are the oracle's bit for bit: the loss is the last stage's sum of microbatch losses over m, the
// grad_norm the square root of every stage's per-parameter sums of squares (of the iteration's last step) added
// in canonical order, the lr the schedule's at that step, the validation loss the last stage's sum over the
// evaluation's microbatch count. Timing is rank 0's wall clock between iterations completing.
#pragma once

#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "metrics_writer.h"
#include "optim/lr_schedule.h"
#include "pipeline/pipeline_setup.h"
#include "pipeline/stage_report.h"
#include "pipeline/transport.h"
#include "trainer.h"

namespace nb {

class ProgressCollector {
public:
    // `transport` is stage 0's endpoint. Opens --metrics (RuntimeError naming the file when it cannot).
    ProgressCollector(const PipelineSetup& setup, Transport& transport, std::FILE* log);

    // Takes whatever has arrived and prints every iteration now complete; true when anything arrived.
    bool poll();
    bool done() const { return weights_hash_.has_value(); }
    // What is still missing (for deadlock reports).
    std::string waiting_for() const;

    // Once done: the run's summary (steps, losses, tokens/s, the weights' hash) and each stage's peak versions.
    TrainSummary summary() const;
    const std::vector<int64_t>& peak_versions() const { return peak_versions_; }

    static constexpr int64_t kIterationsAhead = 2;  // report receives posted ahead

private:
    using Clock = std::chrono::steady_clock;

    void post_reports_ahead();
    bool take_reports();
    void print_iteration(int64_t t, const std::vector<StageReport>& reports);
    void post_final_receives();
    bool take_final();

    const PipelineSetup& setup_;
    Transport& transport_;
    std::FILE* log_;
    std::unique_ptr<MetricsWriter> metrics_;
    LrSchedule lr_;
    Clock::time_point start_, last_done_;

    int64_t next_to_print_ = 0, posted_until_ = 0;
    std::map<int64_t, std::vector<std::optional<StageReport>>> reports_;  // by iteration, per stage

    bool final_posted_ = false;
    std::vector<std::vector<std::optional<Tensor>>> final_weights_;  // per stage, per parameter
    std::vector<std::optional<StageFinal>> finals_;
    std::vector<int64_t> peak_versions_;
    std::optional<std::string> weights_hash_;

    TrainSummary summary_;
    double train_seconds_ = 0;
};

// The first line of a pipeline run: schedule, stages and their cut, model, data.
void print_pipeline_header(std::FILE* log, const PipelineSetup& setup, const char* where, Device device,
                           int64_t train_windows);

}  // namespace nb

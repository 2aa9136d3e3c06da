// RunLog: what every training loop reports, written once. The plain loop (src/run/trainer.cpp), rank 0's
// collector of a pipeline run (src/run/progress_collector.h) and the oracle (src/run/reference.cpp) each hand it
// one IterationReport per iteration and get the same lines, records and errors for the same numbers:
//   on resuming    the --metrics records after the checkpoint's step are dropped (each step is recorded once);
//   per iteration  the progress line (every --log-interval iterations, at the last one, and whenever validation
//                  ran); the --metrics record (appended, flushed line by line); then the NaN policy
//                  (src/plan/train_progress.h: with --stop-on-nan a non-finite loss ends the run once its line
//                  and record are written).
//   at the end     the summary (final losses; tokens/s over the iterations' own time, evaluation excluded) and
//                  the final lines that `train` and `reference` print.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "src/core/metrics_writer.h"
#include "src/plan/train_options.h"
#include "src/plan/train_progress.h"

namespace nb {

struct TrainSummary {
    int64_t steps = 0;
    double final_train_loss = 0;  // mean over the last iteration's microbatches
    double final_val_loss = -1;   // -1 when no validation ran
    double tokens_per_s = 0;      // over the whole run, evaluation excluded
    std::string weights_sha256;
};

class RunLog {
public:
    // Opens --metrics for append (RuntimeError naming the file when it cannot). `log` takes the lines.
    RunLog(const TrainOptions& options, std::FILE* log);

    bool line_due(const IterationReport& r) const { return progress_line_due(r, log_interval_); }
    // One iteration: `line` is what the progress line shows when it is due (a pipeline run adds its timing since
    // the previous line), `record` what --metrics gets; both carry the same loss, lr, norm and validation loss.
    void iteration(const IterationReport& record, const IterationReport& line);
    void iteration(const IterationReport& report) { iteration(report, report); }
    // A run resumed from the checkpoint at `step`, before its first iteration: the --metrics records after `step`
    // (written by the run that stopped after that checkpoint, and about to be written again) are dropped
    // (src/core/metrics_resume.h), with a line saying how many when there were any. Returns the clock the run goes
    // on from: the checkpoint's `elapsed_s`, or the file's last kept record's when that is later (a record of the
    // step from a later timeline than the checkpoint's, after a resume from an older checkpoint), so that
    // elapsed_s never runs backwards in the file.
    double resumed_at(int64_t step, double checkpoint_elapsed_s);

    // The run's summary: its final losses and tokens/s, with the caller's step count and weights hash.
    TrainSummary summary(int64_t steps, std::string weights_sha256) const;

private:
    int64_t log_interval_;
    bool stop_on_nan_;
    int64_t tokens_per_iter_;
    std::FILE* log_;
    std::unique_ptr<MetricsWriter> metrics_;
    double train_seconds_ = 0;
    int64_t iterations_ = 0;
    TrainSummary summary_;
};

// "activation stashes at most, MiB per stage: measured 73.1 88.0, planned 73.1 88.0", then "memory planned per
// stage, MiB: 140.2 151.0" (the memory check's whole figure: what a process's peak resident memory is set beside).
struct ActivationPeaks {
    std::vector<double> measured_bytes, planned_bytes, planned_total_bytes;
};

// The lines a run ends with, in this order: "weight versions held at most, per stage: 3 2 1" (pipeline runs and
// the oracle), the activation stashes' peaks (pipeline runs), "final val_loss X" (when validation ran), "final weights sha256 HEX", and "final optimizer state
// sha256 HEX" (pipeline runs and the oracle: pipeline/stage/state_hash.h).
struct FinalLines {
    TrainSummary run;
    std::optional<std::vector<int64_t>> peak_versions = std::nullopt;
    std::optional<std::string> optimizer_sha256 = std::nullopt;
    // Pipeline runs: per stage (with chunks, per part), the activation stashes' measured peak over the run and the memory check's plan.
    std::optional<ActivationPeaks> activation_peaks = std::nullopt;
};
void print_final_lines(std::FILE* out, const FinalLines& lines);

}  // namespace nb

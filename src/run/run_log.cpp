#include "src/run/run_log.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "src/core/metrics_resume.h"

namespace nb {

RunLog::RunLog(const TrainOptions& o, std::FILE* log)
    : log_interval_(o.log_interval), stop_on_nan_(o.stop_on_nan), tokens_per_iter_(o.tokens_per_iter()), log_(log) {
    if (!o.metrics_path.empty()) metrics_ = std::make_unique<MetricsWriter>(o.metrics_path);
}

double RunLog::resumed_at(int64_t step, double checkpoint_elapsed_s) {
    if (!metrics_) return checkpoint_elapsed_s;
    const MetricsCut cut = drop_metrics_after(metrics_->path(), step);
    if (cut.dropped_records > 0) {
        fmt::print(log_, "metrics: dropped {} record{} after step {} from {} (the stopped run's; recomputed now)\n",
                   cut.dropped_records, cut.dropped_records == 1 ? "" : "s", step, metrics_->path());
        std::fflush(log_);
    }
    return std::max(checkpoint_elapsed_s, cut.last_elapsed_s.value_or(checkpoint_elapsed_s));
}

void RunLog::iteration(const IterationReport& record, const IterationReport& line) {
    if (line_due(line)) {
        fmt::print(log_, "{}\n", progress_line(line));
        std::fflush(log_);
    }
    if (!line.sample.empty()) {  // one line, JSON-quoted: the text's newlines stay inside it
        fmt::print(log_, "sample at step {}: {}\n", line.iteration, json_quote(line.sample));
        std::fflush(log_);
    }
    if (metrics_) metrics_->write(metrics_record(record));
    train_seconds_ += record.seconds;
    ++iterations_;
    summary_.final_train_loss = record.loss;
    if (record.val_loss >= 0) summary_.final_val_loss = record.val_loss;
    apply_nan_policy(record, stop_on_nan_);
}

TrainSummary RunLog::summary(int64_t steps, std::string weights_sha256) const {
    TrainSummary s = summary_;
    s.steps = steps;
    s.tokens_per_s = iterations_ > 0 ? static_cast<double>(tokens_per_iter_ * iterations_) / train_seconds_ : 0.0;
    s.weights_sha256 = std::move(weights_sha256);
    return s;
}

void print_final_lines(std::FILE* out, const FinalLines& lines) {
    if (lines.peak_versions)
        fmt::print(out, "weight versions held at most, per stage: {}\n", fmt::join(*lines.peak_versions, " "));
    if (const auto& a = lines.activation_peaks) {
        auto mib = [](const std::vector<double>& bytes) {
            std::vector<std::string> out;
            for (double b : bytes) out.push_back(fmt::format("{:.1f}", b / (1024.0 * 1024.0)));
            return fmt::format("{}", fmt::join(out, " "));
        };
        fmt::print(out, "activation stashes at most, MiB per stage: measured {}, planned {}\n", mib(a->measured_bytes),
                   mib(a->planned_bytes));
        fmt::print(out, "memory planned per stage, MiB: {}\n", mib(a->planned_total_bytes));
    }
    if (lines.run.final_val_loss >= 0) fmt::print(out, "final val_loss {:.4f}\n", lines.run.final_val_loss);
    fmt::print(out, "final weights sha256 {}\n", lines.run.weights_sha256);
    if (lines.optimizer_sha256) fmt::print(out, "final optimizer state sha256 {}\n", *lines.optimizer_sha256);
}

}  // namespace nb

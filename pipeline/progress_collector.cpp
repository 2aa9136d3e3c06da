#include "pipeline/progress_collector.h"

#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "model/partition.h"
#include "optim/grad_clip.h"
#include "train_data.h"
#include "train_progress.h"
#include "weights_hash.h"

namespace nb {

ProgressCollector::ProgressCollector(const PipelineSetup& setup, Transport& transport, std::FILE* log)
    : setup_(setup),
      transport_(transport),
      log_(log),
      lr_(setup.options.lr, setup.spec.optimizer_steps()),
      start_(Clock::now()),
      last_done_(start_) {
    if (transport.stage() != 0) throw std::logic_error("the progress collector runs on stage 0");
    if (!setup.options.metrics_path.empty()) metrics_ = std::make_unique<MetricsWriter>(setup.options.metrics_path);
}

bool ProgressCollector::poll() {
    if (done()) return false;
    if (next_to_print_ < setup_.options.train_iters) {
        post_reports_ahead();
        return take_reports();
    }
    post_final_receives();
    return take_final();
}

void ProgressCollector::post_reports_ahead() {
    const int64_t end = std::min(setup_.options.train_iters, next_to_print_ + kIterationsAhead);
    for (; posted_until_ < end; ++posted_until_) {
        reports_[posted_until_].resize(static_cast<size_t>(setup_.num_stages()));
        for (int s = 0; s < setup_.num_stages(); ++s)
            transport_.post_recv_values(s, {Channel::report, posted_until_},
                                        StageReport::max_values(setup_.layouts[static_cast<size_t>(s)].size()));
    }
}

bool ProgressCollector::take_reports() {
    bool arrived = false;
    for (auto& [t, per_stage] : reports_)
        for (int s = 0; s < setup_.num_stages(); ++s) {
            auto& slot = per_stage[static_cast<size_t>(s)];
            if (slot) continue;
            std::optional<std::vector<double>> values = transport_.try_take_values(s, {Channel::report, t});
            if (!values) continue;
            slot = StageReport::from_values(*values);
            arrived = true;
        }
    // Print the iterations now complete, in order.
    while (!reports_.empty() && reports_.begin()->first == next_to_print_) {
        std::vector<StageReport> complete;
        for (const auto& r : reports_.begin()->second) {
            if (!r) return arrived;
            complete.push_back(*r);
        }
        reports_.erase(reports_.begin());
        print_iteration(next_to_print_++, complete);
        post_reports_ahead();
    }
    return arrived;
}

void ProgressCollector::print_iteration(int64_t t, const std::vector<StageReport>& reports) {
    const TrainOptions& o = setup_.options;
    const StageReport& last = reports.back();
    if (!last.loss_sum) throw std::logic_error(fmt::format("the last stage's report on iteration {} has no loss", t));
    std::vector<std::vector<double>> sums;
    for (const StageReport& r : reports) sums.push_back(r.sum_squares);

    const auto now = Clock::now();
    const double seconds = std::chrono::duration<double>(now - last_done_).count();
    last_done_ = now;
    train_seconds_ += seconds;
    const int64_t last_step = (t + 1) * setup_.steps_per_iteration() - 1;
    IterationReport line{t + 1,
                         o.train_iters,
                         *last.loss_sum / static_cast<double>(o.num_microbatches),
                         lr_.lr_at(last_step),
                         std::sqrt(total_sum_squares(sums)),
                         static_cast<double>(o.tokens_per_iter()) / seconds,
                         seconds};
    if (last.val_loss_sum) line.val_loss = *last.val_loss_sum / static_cast<double>(o.eval_iters * o.num_microbatches);
    if (progress_line_due(line, o.log_interval)) {
        fmt::print(log_, "{}\n", progress_line(line));
        std::fflush(log_);
    }
    if (metrics_) metrics_->write(metrics_record(line));
    summary_.final_train_loss = line.loss;
    if (line.val_loss >= 0) summary_.final_val_loss = line.val_loss;
}

void ProgressCollector::post_final_receives() {
    if (final_posted_) return;
    final_posted_ = true;
    for (int s = 0; s < setup_.num_stages(); ++s) {
        const ParamLayout& layout = setup_.layouts[static_cast<size_t>(s)];
        final_weights_.emplace_back(static_cast<size_t>(layout.size()));
        for (int i = 0; i < layout.size(); ++i)
            transport_.post_recv(s, {Channel::final_weights, i}, layout[i].shape, DType::f32);
        transport_.post_recv_values(s, {Channel::final_values, 0}, StageFinal::max_values());
    }
    finals_.resize(static_cast<size_t>(setup_.num_stages()));
}

bool ProgressCollector::take_final() {
    bool arrived = false, complete = true;
    for (int s = 0; s < setup_.num_stages(); ++s) {
        auto& weights = final_weights_[static_cast<size_t>(s)];
        for (int i = 0; i < static_cast<int>(weights.size()); ++i) {
            auto& slot = weights[static_cast<size_t>(i)];
            if (!slot) {
                slot = transport_.try_take(s, {Channel::final_weights, i});
                arrived |= slot.has_value();
            }
            complete &= slot.has_value();
        }
        auto& final = finals_[static_cast<size_t>(s)];
        if (!final) {
            if (auto values = transport_.try_take_values(s, {Channel::final_values, 0})) {
                final = StageFinal::from_values(*values);
                arrived = true;
            }
        }
        complete &= final.has_value();
    }
    if (!complete) return arrived;
    TensorSet all;  // canonical order: stage by stage, each in layout order
    for (auto& stage : final_weights_)
        for (auto& t : stage) all.tensors.push_back(t->to(Device::cpu));
    for (const auto& f : finals_) peak_versions_.push_back(f->peak_versions);
    weights_hash_ = weights_sha256(all);
    return true;
}

std::string ProgressCollector::waiting_for() const {
    if (done()) return "done";
    if (next_to_print_ < setup_.options.train_iters) return fmt::format("the reports on iteration {}", next_to_print_);
    return "the final weights";
}

TrainSummary ProgressCollector::summary() const {
    if (!done()) throw std::logic_error("the pipeline's summary asked for before the run has finished");
    TrainSummary s = summary_;
    s.steps = setup_.spec.optimizer_steps();
    s.tokens_per_s =
        static_cast<double>(setup_.options.tokens_per_iter() * setup_.options.train_iters) / train_seconds_;
    s.weights_sha256 = *weights_hash_;
    return s;
}

void print_pipeline_header(std::FILE* log, const PipelineSetup& setup, const char* where, Device device,
                           int64_t train_windows) {
    const TrainOptions& o = setup.options;
    int64_t params = 0;
    for (const ParamLayout& layout : setup.layouts) params += layout.total_numel();
    fmt::print(log,
               "nobubble: --schedule {} on {} stages ({}) {}, model {} ({} parameters) on {}, {} train windows, "
               "{} tokens per iteration, {} optimizer steps\n",
               o.schedule, setup.num_stages(), describe_cut(setup.cut), where, o.model.preset, params,
               device_name(device), train_windows, o.tokens_per_iter(), setup.spec.optimizer_steps());
    std::fflush(log);
}

}  // namespace nb

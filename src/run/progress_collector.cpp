#include "src/run/progress_collector.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

#include "model/partition.h"
#include "optim/grad_clip.h"
#include "optim/stage_optimizer.h"
#include "pipeline/stage/state_hash.h"
#include "pipeline/stage/trace.h"
#include "src/plan/train_data.h"
#include "src/plan/train_progress.h"
#include "src/core/error.h"
#include "src/run/checkpoint.h"

namespace nb {

IterationTiming per_rank_timing(const IterationTiming& t, const StagePlacement& placement) {
    const auto n = static_cast<size_t>(placement.ranks);
    IterationTiming out{t.seconds, std::vector<double>(n), std::vector<double>(n), std::vector<double>(n),
                        std::vector<double>(n)};
    for (size_t s = 0; s < t.busy_s.size(); ++s) {
        const auto r = static_cast<size_t>(placement.rank_of(static_cast<int>(s)));
        out.busy_s[r] += t.busy_s[s];
        out.wall_s[r] = std::max(out.wall_s[r], t.wall_s[s]);
        out.act_peak_bytes[r] += t.act_peak_bytes[s];
        out.replica_wait_s[r] += t.replica_wait_s[s];
    }
    return out;
}

namespace {

// The trace is written at the end (atomically, through PATH.tmp): a path that cannot be written fails the run
// before it starts, as --metrics does.
void check_writable_trace(const std::string& path) {
    const std::string tmp = path + ".tmp";
    std::FILE* f = std::fopen(tmp.c_str(), "w");
    if (!f) throw RuntimeError(fmt::format("--trace '{}': cannot open for writing: {}", path, std::strerror(errno)));
    std::fclose(f);
    std::remove(tmp.c_str());
}

IterationTiming zero_timing(int stages) {
    const auto n = static_cast<size_t>(stages);
    return {0, std::vector<double>(n), std::vector<double>(n), std::vector<double>(n), std::vector<double>(n)};
}

// The pipeline's part of a progress line or metrics record, from the stages' own measures over `t`, per rank.
void add_pipeline_fields(IterationReport& r, const IterationTiming& per_stage, const StagePlacement& placement) {
    const IterationTiming t = per_rank_timing(per_stage, placement);
    double busy = 0, wall = 0;
    for (size_t q = 0; q < t.busy_s.size(); ++q) {
        r.stage_busy.push_back(t.wall_s[q] > 0 ? t.busy_s[q] / t.wall_s[q] : 0.0);
        r.act_mib.push_back(t.act_peak_bytes[q] / (1024.0 * 1024.0));
        busy += t.busy_s[q];
        wall += t.wall_s[q];
    }
    r.bubble = wall > 0 ? 1.0 - busy / wall : 0.0;
}

// Fills each empty slot of `pending` (by index: the iteration or step; one slot per stage) with what that stage
// has sent on `channel` for that index, decoded by Report::from_values; the slots still empty wait for the next
// call. True when anything arrived.
template <typename Report>
bool take_arrived(Transport& transport, Channel channel,
                  std::map<int64_t, std::vector<std::optional<Report>>>& pending) {
    bool arrived = false;
    for (auto& [index, slots] : pending)
        for (size_t s = 0; s < slots.size(); ++s) {
            if (slots[s]) continue;
            if (auto values = transport.try_take_values(static_cast<int>(s), {channel, index})) {
                slots[s] = Report::from_values(*values);
                arrived = true;
            }
        }
    return arrived;
}

}  // namespace

ProgressCollector::ProgressCollector(const PipelineSetup& setup, Transport& transport, const StopVote& vote,
                                     std::FILE* log, double elapsed_before_s)
    : setup_(setup),
      transport_(transport),
      vote_(vote),
      log_(log),
      run_log_(setup.options, log),
      elapsed_before_s_(elapsed_before_s),
      elapsed_s_(elapsed_before_s),
      lr_(setup.options.lr, setup.spec.optimizer_steps()),
      next_to_print_(setup.first_iteration),
      posted_until_(setup.first_iteration),
      checkpoints_posted_until_(setup.first_iteration),
      since_line_(zero_timing(setup.num_stages())) {
    if (transport.stage() != 0) throw std::logic_error("the progress collector runs on stage 0");
    if (!setup.options.trace_path.empty()) check_writable_trace(setup.options.trace_path);
    if (setup.first_iteration > 0)
        elapsed_before_s_ = elapsed_s_ = run_log_.resumed_at(setup.first_iteration, elapsed_before_s);
}

bool ProgressCollector::poll() {
    if (done()) return false;
    post_checkpoint_receives();
    bool arrived = take_checkpoints();
    if (next_to_print_ < vote_.stop_iteration()) {
        post_reports_ahead();
        return take_reports() || arrived;
    }
    if (vote_.stopped_early() && !stop_line_printed_ && checkpoints_.empty()) {
        print_stopped_by_signal(log_, vote_.stop_signal(), next_to_print_);
        stop_line_printed_ = true;
    }
    if (weights_hash_) return arrived;
    post_final_receives();
    return take_final() || arrived;
}

// ---- checkpoints ----

// The receives of the stages' checkpoint reports, for every save iteration known to run (and the stop's).
void ProgressCollector::post_checkpoint_receives() {
    for (; checkpoints_posted_until_ <= vote_.open_until(); ++checkpoints_posted_until_) {
        const int64_t t = checkpoints_posted_until_;
        if (setup_.saves_after(t) || vote_.ends_early_after(t)) expect_checkpoint(t + 1);
    }
    // An agreed stop after an iteration the loop above had passed already as no save point.
    const int64_t stop = vote_.stop_iteration();
    if (vote_.ends_early_after(stop - 1) && !checkpoints_.contains(stop) && stop > completed_checkpoint_)
        expect_checkpoint(stop);
}

void ProgressCollector::expect_checkpoint(int64_t step) {
    checkpoints_[step].resize(static_cast<size_t>(setup_.num_stages()));
    for (int s = 0; s < setup_.num_stages(); ++s)
        transport_.post_recv_values(s, {Channel::checkpoint, step}, CheckpointReport::kValues);
}

bool ProgressCollector::take_checkpoints() {
    const bool arrived = take_arrived(transport_, Channel::checkpoint, checkpoints_);
    // Complete them in step order: a newer one only after the older ones.
    while (!checkpoints_.empty()) {
        auto& [step, reports] = *checkpoints_.begin();
        if (!std::all_of(reports.begin(), reports.end(), [](const auto& r) { return r.has_value(); })) break;
        complete(step, reports);
        completed_checkpoint_ = step;
        checkpoints_.erase(checkpoints_.begin());
    }
    return arrived;
}

// Every stage's file of `step` is written: the manifest makes it a checkpoint.
void ProgressCollector::complete(int64_t step, std::vector<std::optional<CheckpointReport>>& reports) {
    std::vector<CheckpointEntry> entries;
    // The run's clock at the checkpoint: the last stage's, as the iterations' elapsed_s count it.
    SavedRun saved{step, setup_.cut, {}, {reports[0]->data_epoch, reports[0]->data_index},
                   elapsed_before_s_ + reports.back()->clock_s};
    for (size_t s = 0; s < reports.size(); ++s) {
        entries.push_back({stage_file_name(static_cast<int>(s)), reports[s]->bytes, reports[s]->sha256});
        saved.steps_taken.push_back(reports[s]->steps_taken);
    }
    complete_checkpoint(setup_.options, make_staging_dir(setup_.options.save_dir, step), entries, saved, log_);
}

bool ProgressCollector::checkpoints_done() const {
    if (setup_.options.save_dir.empty()) return true;
    return checkpoints_.empty() && checkpoints_posted_until_ >= vote_.stop_iteration();
}

// ---- reports ----

void ProgressCollector::post_reports_ahead() {
    const int64_t end = std::min({vote_.open_until() + 1, next_to_print_ + kIterationsAhead});
    for (; posted_until_ < end; ++posted_until_) {
        reports_[posted_until_].resize(static_cast<size_t>(setup_.num_stages()));
        for (int s = 0; s < setup_.num_stages(); ++s) {
            const auto k = static_cast<size_t>(s);
            const ModelConfig& model = setup_.options.model;
            transport_.post_recv_values(s, {Channel::report, posted_until_},
                                        StageReport::max_values(setup_.layouts[k].size(),
                                                                moe_block_count(model, setup_.cut[k]),
                                                                model.moe.num_experts));
        }
    }
}

bool ProgressCollector::take_reports() {
    const bool arrived = take_arrived(transport_, Channel::report, reports_);
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
    std::vector<MoeBlockLoad> moe;  // stage after stage: block order
    for (const StageReport& r : reports) {
        sums.push_back(r.sum_squares);
        moe.insert(moe.end(), r.moe.begin(), r.moe.end());
    }

    // The iteration's time is the last stage's own: its wall time since its previous report, on the clock the
    // stages share. (Timing the arrival of the reports here would not do: in one process a stage that never
    // blocks runs several iterations before its reports are read, and they would arrive 0 ms apart.)
    const double seconds = last.wall_s;
    const int64_t last_step = (t + 1) * setup_.steps_per_iteration() - 1;
    IterationReport line{t + 1,
                         o.train_iters,
                         *last.loss_sum / static_cast<double>(o.microbatches_per_iter()),
                         lr_.lr_at(last_step),
                         std::sqrt(total_sum_squares(sums)),
                         static_cast<double>(o.tokens_per_iter()) / seconds,
                         seconds};
    line.moe = moe_layer_figures(moe, o.microbatches_per_iter());
    elapsed_s_ += seconds;
    line.elapsed_s = elapsed_s_;
    if (last.val_loss_sum)
        line.val_loss = *last.val_loss_sum / static_cast<double>(o.eval_iters * o.microbatches_per_iter());

    IterationTiming timing = zero_timing(setup_.num_stages());
    timing.seconds = seconds;
    for (size_t s = 0; s < reports.size(); ++s) {
        timing.busy_s[s] = reports[s].busy_s;
        timing.wall_s[s] = reports[s].wall_s;
        timing.act_peak_bytes[s] = reports[s].act_peak_bytes;
        timing.replica_wait_s[s] = reports[s].replica_wait_s;
        since_line_.busy_s[s] += reports[s].busy_s;
        since_line_.wall_s[s] += reports[s].wall_s;
        since_line_.act_peak_bytes[s] = std::max(since_line_.act_peak_bytes[s], reports[s].act_peak_bytes);
    }
    since_line_.seconds += seconds;
    timings_.push_back(timing);

    IterationReport printed = line;
    if (run_log_.line_due(line)) {
        add_pipeline_fields(printed, since_line_, setup_.spec.placement());
        since_line_ = zero_timing(setup_.num_stages());
    }
    IterationReport record = line;
    add_pipeline_fields(record, timing, setup_.spec.placement());
    run_log_.iteration(record, printed);
}

void ProgressCollector::post_final_receives() {
    if (final_posted_) return;
    final_posted_ = true;
    const auto stages = static_cast<size_t>(setup_.num_stages());
    for (int s = 0; s < setup_.num_stages(); ++s) {
        const ParamLayout& layout = setup_.layouts[static_cast<size_t>(s)];
        final_weights_.emplace_back(static_cast<size_t>(layout.size()));
        for (int i = 0; i < layout.size(); ++i)
            transport_.post_recv(s, {Channel::final_weights, i}, layout[i].shape, DType::f32);
        const std::vector<Shape> state_shapes = stage_optimizer_state_shapes(
            setup_.options.optimizer, setup_.options.delay_fix, layout, setup_.options.lr.lr);
        final_state_.emplace_back(state_shapes.size());
        for (size_t i = 0; i < state_shapes.size(); ++i)
            transport_.post_recv(s, {Channel::final_optimizer, static_cast<int64_t>(i)}, state_shapes[i], DType::f32);
        transport_.post_recv_values(s, {Channel::final_values, 0}, StageFinal::max_values());
    }
    finals_.resize(stages);
    traces_.resize(stages);
    trace_posted_.assign(stages, false);
}

namespace {

// Takes whatever of `slots` (tensors of the channel, by index) has arrived from `stage`; true when all have.
bool take_tensors(Transport& transport, int stage, Channel channel, std::vector<std::optional<Tensor>>& slots,
                  bool& arrived) {
    bool complete = true;
    for (size_t i = 0; i < slots.size(); ++i) {
        auto& slot = slots[i];
        if (!slot) {
            slot = transport.try_take(stage, {channel, static_cast<int64_t>(i)});
            arrived |= slot.has_value();
        }
        complete &= slot.has_value();
    }
    return complete;
}

}  // namespace

bool ProgressCollector::take_final() {
    const bool tracing = !setup_.options.trace_path.empty();
    bool arrived = false, complete = true;
    for (int s = 0; s < setup_.num_stages(); ++s) {
        const auto k = static_cast<size_t>(s);
        complete &= take_tensors(transport_, s, Channel::final_weights, final_weights_[k], arrived);
        complete &= take_tensors(transport_, s, Channel::final_optimizer, final_state_[k], arrived);
        auto& final = finals_[k];
        if (!final) {
            if (auto values = transport_.try_take_values(s, {Channel::final_values, 0})) {
                final = StageFinal::from_values(*values);
                arrived = true;
            }
        }
        complete &= final.has_value();
        if (!tracing) continue;
        // The trace's size comes with the final values; its records follow them.
        if (final && !trace_posted_[k]) {
            transport_.post_recv_values(s, {Channel::trace, 0}, static_cast<size_t>(final->trace_values));
            trace_posted_[k] = true;
        }
        if (trace_posted_[k] && !traces_[k]) {
            if (auto values = transport_.try_take_values(s, {Channel::trace, 0})) {
                traces_[k] = decode_timed_tasks(*values);
                arrived = true;
            }
        }
        complete &= traces_[k].has_value();
    }
    if (complete) finish_run();
    return arrived;
}

void ProgressCollector::finish_run() {
    std::vector<std::vector<Tensor>> weights, state;  // canonical order: stage by stage (pipeline/stage/state_hash.h)
    for (auto& stage : final_weights_) {
        weights.emplace_back();
        for (auto& t : stage) weights.back().push_back(std::move(*t));
    }
    for (auto& stage : final_state_) {
        state.emplace_back();
        for (auto& t : stage) state.back().push_back(std::move(*t));
    }
    for (const auto& f : finals_) {
        peak_versions_.push_back(f->peak_versions);
        final_values_.push_back(*f);
    }
    if (!setup_.options.trace_path.empty()) {
        TraceRecorder trace;
        for (size_t s = 0; s < traces_.size(); ++s)
            for (const TimedTask& t : *traces_[s]) trace.add(to_trace_event(t, static_cast<int>(s)));
        trace.write_chrome_json(setup_.options.trace_path, setup_.num_stages());
    }
    optimizer_hash_ = stages_sha256(state);
    // last: it marks the collector done
    weights_hash_ = stages_weights_sha256(std::move(weights), setup_.options.model.tie_embeddings);
}

std::string ProgressCollector::waiting_for() const {
    if (done()) return "done";
    if (next_to_print_ < vote_.stop_iteration()) return fmt::format("the reports on iteration {}", next_to_print_);
    if (!checkpoints_.empty()) return fmt::format("the stages' checkpoint files of step {}", checkpoints_.begin()->first);
    return "the final weights, optimizer state and values (and with --trace the traces)";
}

TrainSummary ProgressCollector::summary() const {
    if (!done()) throw std::logic_error("the pipeline's summary asked for before the run has finished");
    return run_log_.summary(vote_.stop_iteration() * setup_.steps_per_iteration(), *weights_hash_);
}

void print_pipeline_header(std::FILE* log, const PipelineSetup& setup, const char* where, Device device,
                           int64_t train_windows) {
    const TrainOptions& o = setup.options;
    int64_t params = 0;
    for (const ParamLayout& layout : setup.layouts) params += layout.trainable_numel();
    fmt::print(log,
               "nobubble: --schedule {} on {} ({}) {}, model {} ({} parameters) on {}, {} train windows, "
               "{} tokens per iteration, {} optimizer steps, {}\n",
               schedule_kind_name(o.schedule), o.describe_stages(), describe_cut(setup.cut), where, o.model.preset, params,
               device_name(device), train_windows, o.tokens_per_iter(), setup.spec.optimizer_steps(),
               o.describe_update_rule());
    std::fflush(log);
}

}  // namespace nb

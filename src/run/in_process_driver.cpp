#include <memory>
#include <stdexcept>

#include <fmt/format.h>

#include "src/run/backend.h"
#include "src/core/error.h"
#include "pipeline/transport/in_process_transport.h"
#include "src/run/pipeline_driver.h"
#include "src/run/progress_collector.h"
#include "pipeline/stage/stage_memory.h"
#include "pipeline/stage/stage_runner.h"

namespace nb {

namespace {

// Runs `body` for stage `stage`, rethrowing its error as the same kind with the stage named in front.
template <class Body>
auto for_stage(int stage, Body&& body) -> decltype(body()) {
    const auto prefixed = [stage](const std::exception& e) {
        return fmt::format("stage {}: {}", stage, error_text(e));
    };
    try {
        return body();
    } catch (const UsageError& e) {
        throw UsageError(prefixed(e));
    } catch (const RuntimeError& e) {
        throw RuntimeError(prefixed(e));
    } catch (const std::logic_error& e) {
        throw std::logic_error(prefixed(e));
    } catch (const std::exception& e) {
        throw std::runtime_error(prefixed(e));
    }
}

bool advance_until_blocked(StageRunner& runner) {
    return for_stage(runner.stage(), [&] {
        bool moved = false;
        while (runner.try_advance()) moved = true;
        return moved;
    });
}

std::string deadlock_message(const std::vector<std::unique_ptr<StageRunner>>& runners,
                             const ProgressCollector& collector) {
    std::string msg = "pipeline deadlock: no stage can move;";
    for (const auto& r : runners) msg += fmt::format(" stage {} waits at {};", r->stage(), r->next_task());
    msg += fmt::format(" stage 0's progress collector waits for {}", collector.waiting_for());
    return msg;
}

// All stages live in this process: their sum must fit, checked before any stage allocates.
void require_stages_fit(const PipelineSetup& setup, const Ops& ops) {
    StageMemory need;
    for (int s = 0; s < setup.num_stages(); ++s) need += estimate_stage_memory(setup, s, ops.activation_dtype());
    require_memory_fits(0, setup.num_stages(), need, ops.available_memory());
}

}  // namespace

PipelineSummary run_in_process(const PipelineSetup& setup, const ResumePoint* resume, std::FILE* log) {
    std::unique_ptr<Ops> ops = make_ops(setup.options.device);
    require_stages_fit(setup, *ops);
    // --save DIR: this process's for the whole run, with room for a checkpoint, or one line before any step.
    const std::optional<SaveDirLock> save_lock =
        claim_save_dir(setup.options, [&] { return estimate_checkpoint_bytes(setup, ops->activation_dtype()); });
    InProcessNetwork network(setup.num_stages());
    std::vector<std::unique_ptr<StageRunner>> runners;
    for (int s = 0; s < setup.num_stages(); ++s)
        runners.push_back(
            for_stage(s, [&] {
                auto runner = std::make_unique<StageRunner>(setup, s, network.endpoint(s), *ops);
                prepare_runner(*runner, setup, resume);
                return runner;
            }));
    print_pipeline_header(log, setup, "in one process", ops->device(), runners[0]->train_windows());
    ProgressCollector collector(setup, network.endpoint(0), runners[0]->stop_vote(), log,
                                resume ? resume->saved.elapsed_s : 0.0);
    const auto origin = StageClock::Clock::now();
    for (auto& r : runners) r->start_clock(origin);

    for (;;) {
        bool moved = false, all_done = true;
        for (auto& r : runners) {
            moved |= advance_until_blocked(*r);
            all_done &= r->done();
        }
        moved |= for_stage(0, [&] { return collector.poll(); });
        if (all_done && collector.done()) break;
        if (!moved) throw std::logic_error(deadlock_message(runners, collector));
    }
    return pipeline_summary(collector, setup, ops->activation_dtype());
}

PipelineSummary pipeline_summary(const ProgressCollector& collector, const PipelineSetup& setup, DType activation_dtype) {
    std::vector<int64_t> planned_act_bytes, planned_bytes;
    for (int s = 0; s < setup.num_stages(); ++s) {
        const StageMemory m = estimate_stage_memory(setup, s, activation_dtype);
        planned_act_bytes.push_back(m.activations_bytes);
        planned_bytes.push_back(m.total_bytes());
    }
    return {collector.summary(), collector.peak_versions(), collector.optimizer_sha256(), collector.finals(),
            collector.iteration_timings(), planned_act_bytes, planned_bytes};
}

ActivationPeaks activation_peaks(const PipelineSummary& summary) {
    ActivationPeaks peaks;
    for (const StageFinal& f : summary.finals) peaks.measured_bytes.push_back(f.act_peak_bytes);
    for (const int64_t b : summary.planned_act_bytes) peaks.planned_bytes.push_back(static_cast<double>(b));
    for (const int64_t b : summary.planned_bytes) peaks.planned_total_bytes.push_back(static_cast<double>(b));
    return peaks;
}

}  // namespace nb

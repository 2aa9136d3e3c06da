// `nobubble schedule`: build a pipeline schedule, simulate it with fixed costs and print its timeline, bubble
// fraction, in-flight microbatches and weight versions per stage. No model, no MPI.
#include <optional>

#include <fmt/format.h>

#include "src/cli/commands.h"
#include "src/core/error.h"
#include "pipeline/schedule/schedule.h"
#include "pipeline/schedule/simulate.h"
#include "pipeline/schedule/timeline_text.h"

namespace nb::cli {

namespace {

struct ScheduleFlags {
    std::string schedule;
    ScheduleSpec spec;
    SimCosts costs;
    std::optional<double> backward_ms;  // --backward-ms: B = W = half of it
};

void print_header(const ScheduleSpec& spec, const SimCosts& costs) {
    fmt::print("schedule {}: {} stage(s), {} microbatch(es) per iteration, {} iteration(s), {} optimizer step(s)",
               schedule_kind_name(spec.kind), spec.stages, spec.microbatches, spec.steps, spec.optimizer_steps());
    if (spec.kind == ScheduleKind::zb_v)
        fmt::print(", in a V: 2 chunks per stage, chunk 0 of stage s on part s and chunk 1 on part {} - s (F3:1 is "
                   "microbatch 3 on chunk 1)",
                   spec.virtual_stage_count() - 1);
    else if (spec.chunks_per_rank() > 1)
        fmt::print(", interleaved: {} chunks per stage ({} parts; F3:1 is microbatch 3 on chunk 1)",
                   spec.virtual_stages, spec.virtual_stage_count());
    if (spec.sync_start > 0 || spec.sync_cooldown > 0)
        fmt::print(", sync start {}, sync cooldown {}", spec.sync_start, spec.sync_cooldown);
    fmt::print("\ncosts: forward {:g} ms, backward {:g} ms (input {:g} + weight {:g}), p2p {:g} ms, optimizer {:g} ms\n",
               costs.forward_ms, costs.backward_ms(), costs.backward_input_ms, costs.backward_weight_ms, costs.p2p_ms,
               costs.optimizer_ms);
}

void print_stage_table(const std::vector<StagePlan>& plans, const SimResult& result) {
    fmt::print("{:>5}  {:>10}  {:>7}  {:>9}  {:>8}\n", "stage", "busy ms", "busy", "in-flight", "versions");
    for (size_t s = 0; s < plans.size(); ++s) {
        const int stage = static_cast<int>(s);
        const double busy_share = result.makespan_ms > 0 ? result.busy_ms[s] / result.makespan_ms : 0.0;
        fmt::print("{:>5}  {:>10.3f}  {:>6.2f}%  {:>9}  {:>8}\n", s, result.busy_ms[s], 100.0 * busy_share,
                   max_in_flight(plans, stage), max_versions_held(plans, stage));
    }
}

int print_schedule(ScheduleFlags& f) {
    f.spec.kind = parse_schedule_kind(f.schedule);
    f.spec.validate();
    if (f.backward_ms) f.costs.backward_input_ms = f.costs.backward_weight_ms = *f.backward_ms / 2;
    if (f.backward_ms && !(*f.backward_ms >= 0))
        throw UsageError(fmt::format("--backward-ms must be >= 0, got {}", *f.backward_ms));
    f.costs.validate();
    f.costs.step_barrier = steps_synchronize(f.spec.kind);  // the global clip's all-gather
    const std::vector<StagePlan> plans = build_schedule(f.spec);
    const SimResult result = simulate(plans, f.costs, f.spec.placement());
    print_header(f.spec, f.costs);
    fmt::print("{}", render_timeline(result, f.costs));
    if (result.deadlock) throw RuntimeError(result.deadlock_reason);  // a bug in a builder, never the user's
    fmt::print("makespan: {:.3f} ms\n", result.makespan_ms);
    print_stage_table(plans, result);
    fmt::print("bubble fraction: {:.2f}% (idle share of {} stage(s) x {:.3f} ms)\n", 100.0 * result.bubble_fraction,
               f.spec.stages, result.makespan_ms);
    return 0;
}

}  // namespace

Command add_schedule_command(CLI::App& app) {
    auto* sub = app.add_subcommand("schedule", "Print and simulate a pipeline schedule (no model)");
    auto flags = std::make_shared<ScheduleFlags>();
    ScheduleSpec& spec = flags->spec;
    SimCosts& costs = flags->costs;
    sub->add_option("--schedule", flags->schedule, kScheduleKinds.choices_text())->required();
    sub->add_option("--stages", spec.stages, "Pipeline stages (P)")->required();
    sub->add_option("--microbatches,--num-microbatches", spec.microbatches, "Microbatches per iteration (m)")
        ->required();
    sub->add_option("--steps,--train-iters", spec.steps, "Iterations (pipedream: m optimizer steps each)")
        ->capture_default_str();
    sub->add_option("--virtual-stages", spec.virtual_stages,
                    "Model chunks per rank v; with 1f1b and v > 1: interleaved 1F1B (Megatron's order; m a multiple of P)")
        ->capture_default_str();
    sub->add_option("--sync-start", spec.sync_start, "First K optimizer steps run as 1f1b (2bw, pipedream)")
        ->capture_default_str();
    sub->add_option("--sync-cooldown", spec.sync_cooldown, "Last K optimizer steps run as 1f1b (2bw, pipedream)")
        ->capture_default_str();
    sub->add_option("--forward-ms", costs.forward_ms, "Cost of one forward (one timeline column)")
        ->capture_default_str();
    auto* backward = sub->add_option("--backward-ms", flags->backward_ms,
                                     "Cost of one fused backward (sets the input and weight halves to half of it each)");
    auto* input = sub->add_option("--backward-input-ms", costs.backward_input_ms,
                                  "Cost of B, a backward's input half (zb-h1 and zb-v run it apart)")
                      ->capture_default_str();
    auto* weight = sub->add_option("--backward-weight-ms", costs.backward_weight_ms,
                                   "Cost of W, a backward's weight half; a fused backward costs B + W")
                       ->capture_default_str();
    backward->excludes(input)->excludes(weight);
    sub->add_option("--p2p-ms", costs.p2p_ms, "Transfer time of one activation or gradient")->capture_default_str();
    sub->add_option("--optimizer-ms", costs.optimizer_ms, "Cost of one optimizer step")->capture_default_str();
    return {sub, [flags] { return print_schedule(*flags); }};
}

}  // namespace nb::cli

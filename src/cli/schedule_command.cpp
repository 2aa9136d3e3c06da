// `nobubble schedule`: build a pipeline schedule, simulate it with fixed costs and print its timeline, bubble
// fraction, in-flight microbatches and weight versions per stage. No model, no MPI. With --data-parallel-size D,
// each stage's gradient (--grad-mib) is summed over D replicas at the alpha-beta cost of --allreduce-gbps and
// --allreduce-latency-us (replica_sum_cost_ms, pipeline/schedule/simulate.h), and it prints the reduction left
// exposed and, with --tokens-per-microbatch, the tokens/s of the P x D job.
#include <optional>

#include <fmt/format.h>

#include "src/cli/commands.h"
#include "src/core/error.h"
#include "pipeline/schedule/schedule.h"
#include "pipeline/schedule/simulate.h"
#include "pipeline/schedule/timeline_text.h"
#include "src/plan/run_shape.h"

namespace nb::cli {

namespace {

struct ScheduleFlags {
    std::string schedule;
    ScheduleSpec spec;
    SimCosts costs;
    std::optional<double> backward_ms;  // --backward-ms: B = W = half of it
    // P, m, V into the spec, and D: the replicas whose gradient sum is costed (the alpha-beta model).
    RunShape shape;
    double grad_mib = 0;                // --grad-mib: one stage's gradient
    double allreduce_gbps = 100;        // --allreduce-gbps: each rank's link, Gbit/s
    double allreduce_latency_us = 5;    // --allreduce-latency-us: per message
    double tokens_per_microbatch = 0;   // --tokens-per-microbatch: B x T, for tokens/s (0: not printed)
};

// The P x D job's figures: the reduction's cost, what of it the steps waited for, and the projected tokens/s.
void print_data_parallel(const ScheduleFlags& f, const SimResult& result) {
    const int replicas = f.shape.data_parallel_size;
    double waited = 0;
    for (double w : result.replica_wait_ms) waited += w;
    const double per_stage = waited / static_cast<double>(result.replica_wait_ms.size());
    fmt::print("data parallel: {} replicas ({} ranks), each stage's {:g} MiB gradient summed in {:.3f} ms per step "
               "(alpha-beta: 2 (D-1) x {:g} us + 2 (D-1)/D x bytes / {:g} Gbit/s)\n",
               replicas, replicas * f.spec.stages, f.grad_mib, f.costs.replica_sum_ms, f.allreduce_latency_us,
               f.allreduce_gbps);
    fmt::print("exposed reduction: {:.3f} ms per stage, {:.2f}% of the makespan (the steps' waits for the sum)\n",
               per_stage, result.makespan_ms > 0 ? 100.0 * per_stage / result.makespan_ms : 0.0);
    if (f.tokens_per_microbatch > 0 && result.makespan_ms > 0) {
        const double tokens = f.tokens_per_microbatch * static_cast<double>(f.spec.microbatches * f.spec.steps) *
                              replicas;
        fmt::print("projected: {:.0f} tokens/s over {} ranks ({:.0f} per rank)\n", tokens / (result.makespan_ms * 1e-3),
                   replicas * f.spec.stages, tokens / (result.makespan_ms * 1e-3) / (replicas * f.spec.stages));
    }
}

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
    check_run_shape(f.shape);
    f.spec.kind = parse_schedule_kind(f.schedule);
    f.spec.stages = f.shape.stages;
    f.spec.microbatches = f.shape.num_microbatches;
    f.spec.virtual_stages = f.shape.virtual_stages;
    f.spec.validate();
    if (f.backward_ms) f.costs.backward_input_ms = f.costs.backward_weight_ms = *f.backward_ms / 2;
    if (f.backward_ms && !(*f.backward_ms >= 0))
        throw UsageError(fmt::format("--backward-ms must be >= 0, got {}", *f.backward_ms));
    f.costs.validate();
    if (!(f.grad_mib >= 0)) throw UsageError(fmt::format("--grad-mib must be >= 0, got {}", f.grad_mib));
    if (!(f.tokens_per_microbatch >= 0))
        throw UsageError(fmt::format("--tokens-per-microbatch must be >= 0, got {}", f.tokens_per_microbatch));
    f.costs.replica_sum_ms =
        replica_sum_cost_ms(f.grad_mib * 1024 * 1024, f.shape.data_parallel_size, f.allreduce_gbps,
                            f.allreduce_latency_us);
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
    if (f.shape.data_parallel_size > 1) print_data_parallel(f, result);
    return 0;
}

}  // namespace

Command add_schedule_command(CLI::App& app) {
    auto* sub = app.add_subcommand("schedule", "Print and simulate a pipeline schedule (no model)");
    auto flags = std::make_shared<ScheduleFlags>();
    ScheduleSpec& spec = flags->spec;
    SimCosts& costs = flags->costs;
    sub->add_option("--schedule", flags->schedule, kScheduleKinds.choices_text())->required();
    // Required: no default shown.
    add_shape_flag(*sub, flags->shape, {ShapeFlag::stages})->required()->default_str("");
    add_shape_flag(*sub, flags->shape, {ShapeFlag::num_microbatches, "", "--microbatches"})
        ->required()
        ->default_str("");
    sub->add_option("--steps,--train-iters", spec.steps, "Iterations (pipedream: m optimizer steps each)")
        ->capture_default_str();
    add_shape_flag(*sub, flags->shape,
                   {ShapeFlag::virtual_stages, "with 1f1b and V > 1, interleaved 1F1B (Megatron's order; m a multiple "
                                               "of P)"});
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
    add_shape_flag(*sub, flags->shape, {ShapeFlag::data_parallel_size, "their gradient sum costed"});
    sub->add_option("--grad-mib", flags->grad_mib, "One stage's gradient, MiB (what the replicas sum each step)")
        ->capture_default_str();
    sub->add_option("--allreduce-gbps", flags->allreduce_gbps, "Each rank's link for the replicas' sum, Gbit/s")
        ->capture_default_str();
    sub->add_option("--allreduce-latency-us", flags->allreduce_latency_us, "Latency of one message, microseconds")
        ->capture_default_str();
    sub->add_option("--tokens-per-microbatch", flags->tokens_per_microbatch,
                    "Tokens of one microbatch (B x T): prints the P x D job's projected tokens/s (0: not)")
        ->capture_default_str();
    return {sub, [flags] { return print_schedule(*flags); }};
}

}  // namespace nb::cli

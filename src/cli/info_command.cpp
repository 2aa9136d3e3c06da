// `nobubble info`: the model's parameters (total and, for MoE, active per token), its FLOPs per token, and the
// per-stage plan for P stages: the cut `train` would make (--pipeline-cut, --pipeline-layout) and what bound each
// stage (cost or memory), blocks, shares of parameters and of active forward + backward FLOPs (the FLOP model's
// estimate of each stage's time) with the slowest stage against the mean, memory as `train` checks it,
// optimizer state per optimizer, and per schedule the weight versions and microbatches in flight it holds.
#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "src/cli/commands.h"
#include "model/flops.h"
#include "model/partition.h"
#include "model/recompute.h"
#include "optim/optimizer_registry.h"
#include "optim/optimizer_shards.h"
#include "optim/stage_optimizer.h"
#include "pipeline/schedule/schedule.h"
#include "pipeline/schedule/simulate.h"
#include "pipeline/stage/stage_memory.h"
#include "src/core/byte_size.h"
#include "src/core/error.h"
#include "src/core/host_memory.h"
#include "src/plan/pipeline_cut.h"
#include "src/plan/run_shape.h"
#include "src/plan/schedule_spec.h"
#include "src/run/cut_memory.h"

namespace nb::cli {

namespace {

struct InfoFlags {
    ModelFlags model;
    CutFlags cut;
    // P, D replicas of every stage, V > 1: an interleaved 1F1B column 1f1b-vV; B, T; m per iteration.
    RunShape shape{.micro_batch_size = 8, .num_microbatches = 8, .seq_length = 256};
    bool distributed_optimizer = false;  // --use-distributed-optimizer: each replica holds 1/D of the state
    double memory_gb = 0;                // --memory-gb: the budget per stage of the recomputation table (0: host's)
};

// Iterations each schedule is built for: enough for 2bw's and pipedream's steady state, where they hold the most
// (pipedream's needs more than 2 p microbatches in all: the warm-up of p, then a full round of 1F1B).
int64_t plan_iterations(int stages, int64_t microbatches) { return 3 + (2 * stages + microbatches - 1) / microbatches; }

std::string with_commas(int64_t n) {
    std::string digits = std::to_string(n), out;
    for (size_t i = 0; i < digits.size(); ++i) {
        if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
        out += digits[i];
    }
    return out;
}

// "3.31 GFLOP", "655 MFLOP".
std::string format_flops(double flops) {
    const char* units[] = {"FLOP", "kFLOP", "MFLOP", "GFLOP", "TFLOP", "PFLOP"};
    size_t u = 0;
    while (flops >= 1000 && u + 1 < std::size(units)) {
        flops /= 1000;
        ++u;
    }
    return fmt::format("{:.3g} {}", flops, units[u]);
}

std::string percent(double part, double whole) { return fmt::format("{:.1f}%", whole > 0 ? 100 * part / whole : 0.0); }

// The options `train` would run with for this plan: the model and batch shape, the stages and their cut, 1f1b,
// AdamW, the CPU's f32, iterations enough for every schedule's steady state.
TrainOptions plan_options(const ModelConfig& c, const InfoFlags& f) {
    TrainOptions o;
    o.model = c;
    // One replica (each rank's share of the state: rank_state_bytes), one chunk per stage (the interleaved
    // column cuts its own: schedule_column).
    o.micro_batch_size = f.shape.micro_batch_size;
    o.seq_length = f.shape.seq_length;
    o.num_microbatches = f.shape.num_microbatches;
    o.stages = f.shape.stages;
    o.train_iters = plan_iterations(f.shape.stages, f.shape.num_microbatches);
    resolve_cut_flags(f.cut, o);
    return o;
}

OptimizerConfig named_optimizer(std::string_view name) {
    OptimizerConfig optimizer;
    optimizer.name = std::string(name);
    return optimizer;
}

// The optimizer state one rank of the stage holds: all of it, or with --use-distributed-optimizer the largest of
// its D replicas' shares (optim/optimizer_shards.h).
int64_t rank_state_bytes(const InfoFlags& f, const OptimizerConfig& optimizer, const ParamLayout& layout) {
    if (!f.distributed_optimizer) return stage_optimizer_state_bytes(optimizer, DelayFixConfig{}, layout);
    const std::vector<int64_t> shares =
        optimizer_shard_bytes(optimizer, DelayFixConfig{}, layout, f.shape.data_parallel_size);
    return *std::max_element(shares.begin(), shares.end());
}

// The memory check's figure for one rank: its optimizer state as rank_state_bytes has it.
StageMemory on_one_rank(StageMemory m, const InfoFlags& f, const OptimizerConfig& optimizer,
                        const ParamLayout& layout) {
    m.optimizer_bytes = rank_state_bytes(f, optimizer, layout);
    return m;
}

// "adamw 8 B, muon 4.2 B, ...": each optimizer's state per parameter of the whole model, from the registry.
std::string state_per_parameter(const ModelConfig& c) {
    const ParamLayout layout = trainable_params(StageModel(c, whole_model_spec(c)).layout()).layout;
    std::vector<std::string> parts;
    for (const std::string_view name : optimizer_names()) {
        const double per_param = static_cast<double>(optimizer_state_bytes(named_optimizer(name), layout)) /
                                 static_cast<double>(layout.trainable_numel());
        parts.push_back(fmt::format("{} {:.3g} B", name, per_param));
    }
    return fmt::format("{}", fmt::join(parts, ", "));
}

void print_model(const ModelConfig& c, int64_t seq_length) {
    const StageSpec whole = whole_model_spec(c);
    const int64_t params = stage_param_count(c, whole);
    const std::string active =
        c.has_moe() ? fmt::format(", {} active per token ({})", with_commas(stage_active_param_count(c, whole)),
                                  percent(static_cast<double>(stage_active_param_count(c, whole)),
                                          static_cast<double>(params)))
                    : "";
    fmt::print("model {}: {} parameters{}\n", c.preset, with_commas(params), active);
    fmt::print("  vocab {}, hidden {}, ffn {}, layers {}, heads {}, kv heads {}, head dim {}, {} embeddings\n",
               c.vocab_size, c.hidden_size, c.ffn_hidden_size, c.num_layers, c.num_heads, c.num_kv_heads,
               c.head_dim(), c.tie_embeddings ? "tied" : "untied");
    fmt::print("  moe: {}\n", c.describe_moe());
    const TokenFlops flops = stage_flops_per_token(c, whole, seq_length);
    const std::string mlp = c.has_moe() ? fmt::format("the dense blocks' MLP, the MoE blocks' router + {} routed "
                                                      "experts + shared expert", c.moe.topk)
                                        : "MLP";
    fmt::print("  FLOPs per token at seq {}: forward {}, forward + backward {} (active: attention, {}, LM head; "
               "attention's T x T square uncausal)\n",
               seq_length, format_flops(flops.forward), format_flops(flops.training()), mlp);
}

// Per stage: what decided its blocks (cost, memory, params, layout), its blocks, its shares of the parameters and of
// the forward + backward FLOPs (the estimated time), and its memory.
void print_stages(const ModelConfig& c, const InfoFlags& f, const StageCut& cut) {
    const TrainOptions o = plan_options(c, f);
    const StageSpec whole = whole_model_spec(c);
    const double total_params = static_cast<double>(stage_param_count(c, whole));
    const double total_flops = stage_flops_per_token(c, whole, f.shape.seq_length).training();
    fmt::print("  {:>5}  {:<6}  {:<26} {:>14} {:>7} {:>7}  {:>10}  {:>10}  {:>11}  {:>10}  {:>10}\n", "stage", "bound",
               "layers", "parameters", "params", "FLOPs", "weights", "gradients", "AdamW state", "act/mb", "total");
    for (size_t s = 0; s < cut.stages.size(); ++s) {
        const StageSpec& sp = cut.stages[s];
        std::string layers = fmt::format("{}blocks {}-{}{}", sp.has_embedding ? "embed + " : "", sp.first_block,
                                         sp.end_block - 1, sp.has_head ? " + head" : "");
        const StageMemory m =
            on_one_rank(estimate_cut_memory(o, {sp}, DType::f32), f, o.optimizer, StageModel(c, sp).layout());
        const int64_t params = stage_param_count(c, sp);
        fmt::print("  {:>5}  {:<6}  {:<26} {:>14} {:>7} {:>7}  {:>10}  {:>10}  {:>11}  {:>10}  {:>10}\n", s,
                   stage_bound_name(cut.bounds[s]), layers, with_commas(params),
                   percent(static_cast<double>(params), total_params),
                   percent(stage_flops_per_token(c, sp, f.shape.seq_length).training(), total_flops),
                   format_bytes(m.weights_bytes), format_bytes(m.gradients_bytes), format_bytes(m.optimizer_bytes),
                   format_bytes(m.activations_bytes), format_bytes(m.total_bytes()));
    }
}

// "cost (...)": how the plan was cut, and the slowest stage against the mean, the pipeline's estimated balance.
void print_cut(const ModelConfig& c, const InfoFlags& f, const StageCut& cut) {
    const TrainOptions o = plan_options(c, f);
    std::string how;
    if (!o.pipeline_layout.empty()) how = describe_cut_choice(o);
    else if (o.pipeline_cut == PipelineCut::params) how = "params (the largest stage's parameters as few as can be)";
    else
        how = "cost (the slowest stage's forward + backward FLOPs as few as can be, by the FLOP model above, not a "
              "measured profile; each stage within the memory `train` checks, under 1f1b and AdamW on this host)";
    fmt::print("pipeline plan: {} stage(s), cut by {}\n", f.shape.stages, how);
    if (!cut.fits_memory)
        fmt::print("  no cut fits every stage's memory: this is the cost-optimal one, which `train` refuses\n");
    double slowest = 0, sum = 0;
    for (const StageSpec& sp : cut.stages) {
        const double flops = stage_flops_per_token(c, sp, f.shape.seq_length).training();
        slowest = std::max(slowest, flops);
        sum += flops;
    }
    fmt::print("  slowest stage: {} of the forward + backward FLOPs, {:.3f} x the mean (1: even)\n",
               percent(slowest, sum), slowest / (sum / static_cast<double>(cut.stages.size())));
}

void print_optimizer_state(const ModelConfig& c, const InfoFlags& f, const std::vector<StageSpec>& specs) {
    fmt::print("optimizer state per {}, by --optimizer (no --delay-fix; ef, predict or lookahead add 4 B per "
               "parameter):\n",
               f.distributed_optimizer ? "rank (the largest of the stage's D shares)" : "stage");
    fmt::print("  {:>5}", "stage");
    for (const std::string_view name : optimizer_names()) fmt::print("  {:>10}", name);
    fmt::print("\n");
    for (size_t s = 0; s < specs.size(); ++s) {
        const ParamLayout layout = StageModel(c, specs[s]).layout();
        fmt::print("  {:>5}", s);
        for (const std::string_view name : optimizer_names())
            fmt::print("  {:>10}", format_bytes(rank_state_bytes(f, named_optimizer(name), layout)));
        fmt::print("\n");
    }
}

// One column of the per-schedule table: a schedule, the cut it runs on (the plan's; a schedule with several chunks
// per stage cuts its own P x V parts), its plans per rank and per part. `why_none`: why it has no plan here.
struct ScheduleColumn {
    std::string name;
    ScheduleSpec spec;
    std::vector<StageSpec> cut;  // per part
    std::vector<StagePlan> rank_plans, part_plans;
    std::string why_none;
};

ScheduleColumn schedule_column(const ModelConfig& c, const InfoFlags& f, const std::vector<StageSpec>& plan_cut,
                               ScheduleKind kind, int virtual_stages) {
    ScheduleColumn col;
    const RunShape& shape = f.shape;
    col.spec = {kind, shape.stages, shape.num_microbatches, plan_iterations(shape.stages, shape.num_microbatches)};
    col.spec.virtual_stages = virtual_stages;
    col.name = std::string(schedule_kind_name(kind)) + (virtual_stages > 1 ? fmt::format("-v{}", virtual_stages) : "");
    try {
        col.spec.validate();
        if (col.spec.chunks_per_rank() == 1) {
            col.cut = plan_cut;
        } else {
            TrainOptions o = plan_options(c, f);
            o.schedule = kind;
            o.virtual_stages = virtual_stages;
            col.cut = choose_pipeline_cut(o, run_memory_fits(o)).stages;
        }
    } catch (const UsageError& e) {  // 2bw needs m >= p; 2P parts need 2P layers: the column says which
        const std::string what = e.what();
        col.why_none = what.find("layers") != std::string::npos ? "too few layers"
                       : what.find("layout") != std::string::npos ? "layout: P counts" : "needs m >= p";
        return col;
    }
    col.rank_plans = build_schedule(col.spec);
    col.part_plans = virtual_stage_plans(col.rank_plans, col.spec.placement());
    return col;
}

// "blocks 0 | 1-2 | 3-4 | 5, rank 0 parts 0 + 3, rank 1 parts 1 + 2": a chunked column's cut and which rank runs what.
std::string describe_parts(const ScheduleColumn& col) {
    const StagePlacement placement = col.spec.placement();
    std::vector<std::string> ranks;
    for (int r = 0; r < placement.ranks; ++r) {
        std::vector<int> parts;
        for (int chunk = 0; chunk < placement.chunks; ++chunk) parts.push_back(placement.part(r, chunk));
        ranks.push_back(fmt::format("rank {} parts {}", r, fmt::join(parts, " + ")));
    }
    return fmt::format("{}, {}", describe_cut(col.cut), fmt::join(ranks, ", "));
}

// The bubble the simulator predicts for the column's plans when each part's F, B and W take its share of the forward
// + backward FLOPs (a third each: B and W each cost about a forward) relative to an even part's.
double predicted_bubble(const ModelConfig& c, const InfoFlags& f, const ScheduleColumn& col) {
    SimCosts costs;
    costs.step_barrier = steps_synchronize(col.spec.kind);  // the global clip's all-gather
    double total = 0;
    for (const StageSpec& sp : col.cut) total += stage_flops_per_token(c, sp, f.shape.seq_length).training();
    const double even = total / static_cast<double>(col.cut.size());
    for (const StageSpec& sp : col.cut)
        costs.part_scale.push_back(stage_flops_per_token(c, sp, f.shape.seq_length).training() / even);
    return simulate(col.rank_plans, costs, col.spec.placement()).bubble_fraction;
}

// Rank r's memory under `col`'s schedule and the options' recomputation, as the memory check counts it: the sum
// of its parts', each with the versions it holds and its activation peak walked over its own actions.
int64_t rank_total_bytes(const TrainOptions& o, const InfoFlags& f, const ScheduleColumn& col, int r) {
    const StagePlacement placement = col.spec.placement();
    int64_t total_bytes = 0;
    for (int chunk = 0; chunk < placement.chunks; ++chunk) {
        const int part = placement.part(r, chunk);
        const StageSpec& sp = col.cut[static_cast<size_t>(part)];
        const StagePlan& actions = col.part_plans[static_cast<size_t>(part)];
        const StageLoad load{max_versions_held(col.part_plans, part), max_in_flight(col.part_plans, part), actions};
        const ParamLayout layout = StageModel(o.model, sp).layout();
        total_bytes +=
            on_one_rank(estimate_stage_memory(o, sp, layout, load, DType::f32), f, o.optimizer, layout).total_bytes();
    }
    return total_bytes;
}

std::vector<ScheduleColumn> schedule_columns(const ModelConfig& c, const InfoFlags& f,
                                             const std::vector<StageSpec>& specs) {
    std::vector<ScheduleColumn> cols;
    for (const ScheduleKind kind : kScheduleKinds.values()) cols.push_back(schedule_column(c, f, specs, kind, 1));
    if (f.shape.virtual_stages > 1)
        cols.push_back(schedule_column(c, f, specs, ScheduleKind::one_f_one_b, f.shape.virtual_stages));
    return cols;
}

// Per schedule, what each stage (rank) holds at once, read off the schedule's own plan (pipeline/schedule/schedule.h),
// and the stage's memory with it (with chunks, the sum of its parts'); then the bubble each is predicted to have on
// its cut.
void print_schedules(const ModelConfig& c, const InfoFlags& f, const std::vector<StageSpec>& specs) {
    const TrainOptions o = plan_options(c, f);
    const std::vector<ScheduleColumn> cols = schedule_columns(c, f, specs);
    fmt::print("per schedule at --num-microbatches {}: weight versions held (v), microbatches in flight (mb; with "
               "chunks per stage, chunk stashes) and the stage's total (f32, AdamW):\n",
               f.shape.num_microbatches);
    fmt::print("  {:>5}", "stage");
    for (const ScheduleColumn& col : cols) fmt::print("  {:>22}", col.name);
    fmt::print("\n");
    for (int r = 0; r < f.shape.stages; ++r) {
        fmt::print("  {:>5}", r);
        for (const ScheduleColumn& col : cols) {
            if (col.rank_plans.empty()) {
                fmt::print("  {:>22}", col.why_none);
                continue;
            }
            fmt::print("  {:>22}", fmt::format("{} v {:>3} mb {:>9}", max_versions_held(col.rank_plans, r),
                                               max_in_flight(col.rank_plans, r),
                                               format_bytes(rank_total_bytes(o, f, col, r))));
        }
        fmt::print("\n");
    }
    fmt::print("  {:>5}", "bubble");
    for (const ScheduleColumn& col : cols)
        fmt::print("  {:>22}", col.rank_plans.empty() ? "-" : percent(predicted_bubble(c, f, col), 1.0));
    fmt::print("\n  (bubble: the simulator's over {} iterations, each part's F, B and W a third of its forward + "
               "backward FLOPs; zb-v and interleaved on their own cut into P x V parts:",
               plan_iterations(f.shape.stages, f.shape.num_microbatches));
    for (const ScheduleColumn& col : cols)
        if (col.spec.chunks_per_rank() > 1 && !col.cut.empty()) fmt::print(" {} {};", col.name, describe_parts(col));
    fmt::print(")\n");
}

// Per schedule and --recompute-granularity, the largest stage's memory (as the check counts it; full: uniform, one
// block per group), and the least recomputation with which every stage fits the budget: --memory-gb, or this host's
// MemAvailable.
void print_recompute_needs(const ModelConfig& c, const InfoFlags& f, const std::vector<StageSpec>& specs) {
    int64_t budget_bytes = static_cast<int64_t>(f.memory_gb * 1e9);
    std::string budget_what = fmt::format("--memory-gb {:g}", f.memory_gb);
    if (f.memory_gb <= 0) {
        budget_bytes = host_memory_available_bytes().value_or(0);
        budget_what = "this host's MemAvailable; --memory-gb sets another";
    }
    TrainOptions o = plan_options(c, f);
    const std::vector<ScheduleColumn> cols = schedule_columns(c, f, specs);
    // From the most kept to the least: the first that fits is what the schedule needs.
    constexpr RecomputeGranularity kLeastFirst[] = {RecomputeGranularity::none, RecomputeGranularity::selective,
                                                   RecomputeGranularity::full};
    fmt::print("recomputation per schedule: the largest stage's total with each --recompute-granularity (f32, "
               "AdamW; full: --recompute-method uniform --recompute-num-layers 1), and what fits {} per stage ({}):\n",
               format_bytes(budget_bytes), budget_what);
    fmt::print("  {:>12}", "schedule");
    for (const RecomputeGranularity g : kLeastFirst) fmt::print("  {:>10}", recompute_granularity_name(g));
    fmt::print("  {}\n", "needs");
    for (const ScheduleColumn& col : cols) {
        fmt::print("  {:>12}", col.name);
        if (col.rank_plans.empty()) {
            fmt::print("  {}\n", col.why_none);
            continue;
        }
        std::string needs = "does not fit";
        for (const RecomputeGranularity g : kLeastFirst) {
            o.recompute = RecomputeConfig{g, RecomputeMethod::uniform, 1};
            int64_t largest = 0;
            for (int r = 0; r < f.shape.stages; ++r) largest = std::max(largest, rank_total_bytes(o, f, col, r));
            fmt::print("  {:>10}", format_bytes(largest));
            if (largest <= budget_bytes && needs == "does not fit") needs = std::string(recompute_granularity_name(g));
        }
        fmt::print("  {}\n", needs);
    }
}

int print_info(const InfoFlags& f) {
    check_run_shape(f.shape);
    const ModelConfig c = resolve_model(f.model);
    if (f.distributed_optimizer && f.shape.data_parallel_size == 1)
        throw UsageError("--use-distributed-optimizer shards the state over the replicas: give --data-parallel-size "
                         "D > 1");
    const TrainOptions o = plan_options(c, f);
    // The cut `train` would make (src/plan/pipeline_cut.h), its memory bound the CPU's: this host's MemAvailable.
    const StageCut cut = choose_pipeline_cut(o, run_memory_fits(o));
    const std::vector<StageSpec>& specs = cut.stages;
    print_model(c, f.shape.seq_length);
    print_cut(c, f, cut);
    if (f.shape.data_parallel_size > 1)
        fmt::print("  data parallel: {} replicas of every stage, {} ranks; each rank holds its stage's weights, "
                   "versions, gradients and activations{}\n",
                   f.shape.data_parallel_size, f.shape.stages * f.shape.data_parallel_size,
                   f.distributed_optimizer ? ", and with --use-distributed-optimizer 1/D of its optimizer state "
                                             "(elementwise state cut by rows; muon's hidden matrices, soap's and mars's tensors whole)"
                                           : ", and all its optimizer state");
    fmt::print("  memory per stage as `train` checks it before it allocates: f32, AdamW, one weight version, one "
               "microbatch of {} x {} tokens\n", f.shape.micro_batch_size, f.shape.seq_length);
    fmt::print("  (a schedule adds its weight versions and microbatches in flight, below; CUDA a bf16 copy of the "
               "weights and bf16 activations)\n");
    fmt::print("  optimizer state per parameter: {}\n", state_per_parameter(c));
    print_stages(c, f, cut);
    print_optimizer_state(c, f, specs);
    print_schedules(c, f, specs);
    print_recompute_needs(c, f, specs);
    return 0;
}

}  // namespace

Command add_info_command(CLI::App& app) {
    auto* sub = app.add_subcommand("info", "Print the parameters, FLOPs per token and the per-stage memory plan");
    auto flags = std::make_shared<InfoFlags>();
    add_model_flags(*sub, flags->model);
    add_shape_flags(*sub, flags->shape,
                    {{ShapeFlag::stages, "to plan for"},
                     {ShapeFlag::data_parallel_size, "the memory per rank: each holds its stage whole"}});
    sub->add_flag("--use-distributed-optimizer", flags->distributed_optimizer,
                  "Each of the D replicas holds 1/D of its stage's optimizer state (Megatron's ZeRO-1)");
    add_shape_flag(*sub, flags->shape,
                   {ShapeFlag::virtual_stages, "adds interleaved 1F1B with V chunks per stage (a column 1f1b-vV, on "
                                               "its own cut into P x V parts)"});
    add_cut_flags(*sub, flags->cut);
    sub->add_option("--memory-gb", flags->memory_gb,
                    "The memory per stage (GB, 1e9 bytes) the recomputation table fits each schedule into (default: "
                    "this host's MemAvailable)")
        ->check(CLI::NonNegativeNumber);
    add_shape_flags(*sub, flags->shape,
                    {{ShapeFlag::micro_batch_size, "activation memory"},
                     {ShapeFlag::seq_length, "activation memory, attention FLOPs"},
                     {ShapeFlag::num_microbatches, "what each schedule holds in flight"}});
    return {sub, [flags] { return print_info(*flags); }};
}

}  // namespace nb::cli

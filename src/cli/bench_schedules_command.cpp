// `nobubble bench schedules`: the throughput comparison of the schedules on one config (docs/DESIGN.md section 5,
// `nobubble bench`). The same model, data, seed and tokens per step run under gpipe, 1f1b, 2bw and pipedream for
// a fixed number of iterations (and zb-h1 and zb-v, the zero-bubble sync schedules, and with --virtual-stages V
// interleaved 1F1B as a row "1f1b-vV"), each on the pipeline executor: under mpirun one stage per rank (P = the number of
// ranks), the real parallel measurement; without mpirun all P stages in this one process, one after another,
// which checks the plumbing but measures no parallelism (said so in the output). With --data-parallel-size D
// (under mpirun only) each schedule runs D replicas of a pipeline of ranks / D stages, and the table gains the share
// of the stages' wall time their optimizer steps waited for the replicas' gradient sum.
//
// Fair comparison (docs/DESIGN.md section 2): gpipe, 1f1b and 2bw take m microbatches of B sequences per step;
// pipedream steps on every microbatch, so it gets one microbatch of m*B sequences per step: the same tokens per
// step.
//
// Per schedule: tokens/s over the timed iterations (the first --warmup-iters are run but not timed), the bubble
// measured by the stages themselves over those iterations (1 - sum of busy time / sum of wall time, busy = the
// forwards, backwards and optimizer steps: pipeline/stage/stage_clock.h), each stage's peak activation memory (live
// stashes), the bubble the simulator predicts for the same plan at F = B = W (pipeline/schedule/simulate.h; the
// yardstick of the measured one) and the final training loss. Printed as one table, and with --out PREFIX written as PREFIX.csv and
// PREFIX.md.
//   Target (the pipeline issue): on 2 ranks with m = 4, 2bw reaches >= 1.15 x the tokens/s of 1f1b (the ideal
//   is (m + P - 1) / m = 1.25: 1f1b fills and drains the pipeline every step, 2bw only once).
//
// `nobubble bench recompute` (and `bench schedules --recompute none,selective,full`): each schedule under each
// --recompute-granularity (full: uniform, one block per group), a row each, then per schedule the peak activation
// stash (the largest stage's) against none's and the time per iteration against none's, beside the targets of the
// recomputation issue on the CPU: full cuts the peak by >= 5x for <= 1.4x the time, selective by >= 2x for <= 1.1x.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "src/cli/commands.h"
#include "src/cli/synthetic_corpus.h"
#include "src/core/error.h"
#include "src/core/mpi_env.h"
#include "src/run/backend.h"
#include "pipeline/schedule/schedule.h"
#include "pipeline/schedule/simulate.h"
#include "src/run/cut_memory.h"
#include "src/plan/run_shape.h"
#include "src/run/pipeline_driver.h"

namespace nb::cli {

namespace {

struct BenchSchedulesFlags {
    ModelFlags model;
    std::string data;  // empty: a synthetic corpus
    std::string device = "cpu";
    // B, m, T; P stages in one process (under mpirun the number of ranks / D); D replicas of the pipeline (under
    // mpirun); V > 1: 1f1b also runs interleaved, V chunks per stage (a row of its own).
    RunShape shape{.micro_batch_size = 4, .num_microbatches = 4, .seq_length = 128, .stages = 2};
    int64_t iters = 12;
    int64_t warmup_iters = 2;
    std::vector<std::string> schedules = {"gpipe", "1f1b", "zb-h1", "zb-v", "2bw", "pipedream"};
    CutFlags cut;  // --pipeline-cut, --pipeline-layout
    double lr = 1e-3;
    uint64_t seed = 1234;
    std::string out;
    double target = 1.15;
    std::vector<std::string> recompute = {"none"};  // --recompute: each schedule under each granularity
    std::string command = "schedules";              // the subcommand, for the report's title
};

struct ScheduleResult {
    ScheduleKind schedule;
    RecomputeGranularity recompute = RecomputeGranularity::none;
    std::string name;  // the schedule's, "1f1b-v2" for interleaved 1F1B with 2 chunks per stage
    int64_t micro_batch_size = 0, num_microbatches = 0;
    double tokens_per_s = 0, bubble = 0, ms_per_iter = 0, final_loss = 0;
    double replica_wait = 0;  // the share of the stages' wall time waiting for the replicas' gradient sum
    double sim_bubble = 0;  // the simulator's, for the same plan at unit costs F = B = W
    std::vector<double> act_mib;  // per stage
};

// One row of the table: a schedule, its chunks per stage (1f1b with V > 1: interleaved), its recomputation.
struct BenchRow {
    ScheduleKind schedule;
    int virtual_stages = 1;
    RecomputeGranularity recompute = RecomputeGranularity::none;
};

// 1f1b, and with --virtual-stages V > 1 interleaved 1F1B right after it; each under every granularity in turn.
std::vector<BenchRow> rows_of(const BenchSchedulesFlags& f, const std::vector<ScheduleKind>& schedules,
                              const std::vector<RecomputeGranularity>& granularities) {
    std::vector<BenchRow> rows;
    for (ScheduleKind s : schedules) {
        std::vector<int> chunks = {1};
        if (s == ScheduleKind::one_f_one_b && f.shape.virtual_stages > 1) chunks.push_back(f.shape.virtual_stages);
        for (const int v : chunks)
            for (const RecomputeGranularity g : granularities) rows.push_back({s, v, g});
    }
    return rows;
}

// The plan of one row's run (UsageError naming the flag for a bad one).
RunPlan plan_for(const BenchSchedulesFlags& f, BenchRow row, const std::string& data, int stages) {
    const ScheduleKind schedule = row.schedule;
    TrainOptions o;
    o.model = resolve_model(f.model);
    o.data_path = data;
    o.device = parse_device(f.device);
    o.val_fraction = 0;  // no validation: the bench times training only
    o.set_shape(f.shape);
    o.train_iters = f.iters;
    o.lr.lr = f.lr;
    o.lr.decay_style = LrDecayStyle::constant;
    o.seed = f.seed;
    o.log_interval = f.iters;  // one progress line, to the log nobody reads
    o.schedule = schedule;
    o.stages = stages;
    o.virtual_stages = row.virtual_stages;
    o.recompute.granularity = row.recompute;
    o.clip_scope = clip_scope_of(schedule);
    if (schedule == ScheduleKind::pipedream) {  // one microbatch per step, as large as the others' whole step
        o.micro_batch_size = f.shape.micro_batch_size * f.shape.num_microbatches;
        o.num_microbatches = 1;
    }
    resolve_cut_flags(f.cut, o);
    return make_run_plan(o, run_memory_fits(o));
}

// The timed iterations' figures from stage 0's summary.
ScheduleResult result_of(const TrainOptions& o, const PipelineSummary& s, int64_t warmup) {
    ScheduleResult r;
    r.schedule = o.schedule;
    r.name = std::string(schedule_kind_name(o.schedule));
    if (o.schedule == ScheduleKind::one_f_one_b && o.virtual_stages > 1)
        r.name += fmt::format("-v{}", o.virtual_stages);
    r.recompute = o.recompute.granularity;
    if (r.recompute != RecomputeGranularity::none)
        r.name += fmt::format(" {}", recompute_granularity_name(r.recompute));
    r.micro_batch_size = o.micro_batch_size;
    r.num_microbatches = o.num_microbatches;
    double seconds = 0, busy = 0, wall = 0, waited = 0;
    for (size_t t = static_cast<size_t>(warmup); t < s.iterations.size(); ++t) {
        // A rank's chunks share its time.
        const IterationTiming it = per_rank_timing(s.iterations[t], o.schedule_spec().placement());
        seconds += it.seconds;
        for (size_t k = 0; k < it.busy_s.size(); ++k)
            busy += it.busy_s[k], wall += it.wall_s[k], waited += it.replica_wait_s[k];
    }
    const auto timed = static_cast<int64_t>(s.iterations.size()) - warmup;
    r.tokens_per_s = static_cast<double>(o.tokens_per_iter() * timed) / seconds;
    r.ms_per_iter = 1e3 * seconds / static_cast<double>(timed);
    r.bubble = wall > 0 ? 1.0 - busy / wall : 0.0;
    r.replica_wait = wall > 0 ? waited / wall : 0.0;
    r.act_mib.assign(static_cast<size_t>(o.stages), 0.0);  // per rank: its chunks' peaks added
    for (size_t k = 0; k < s.finals.size(); ++k)
        r.act_mib[k % r.act_mib.size()] += s.finals[k].act_peak_bytes / (1024.0 * 1024.0);
    r.final_loss = s.run.final_train_loss;
    return r;
}

std::string act_list(const std::vector<double>& act, const char* sep) {
    std::vector<std::string> parts;
    for (double a : act) parts.push_back(fmt::format("{:.2f}", a));
    return fmt::format("{}", fmt::join(parts, sep));
}

const ScheduleResult* find(const std::vector<ScheduleResult>& results, ScheduleKind schedule) {
    for (const auto& r : results)
        if (r.schedule == schedule && r.recompute == RecomputeGranularity::none) return &r;
    return nullptr;
}

struct Report {
    std::string title, note, table_text, ratio_line, target_line, recompute_text;
};

double peak_of(const ScheduleResult& r) { return *std::max_element(r.act_mib.begin(), r.act_mib.end()); }

// Per recomputed row, against its schedule's row without recomputation (same name, same chunks): the largest
// stage's peak stash cut and the time per iteration paid, beside the targets.
std::string recompute_report(const std::vector<ScheduleResult>& results) {
    std::string t;
    for (const ScheduleResult& r : results) {
        if (r.recompute == RecomputeGranularity::none) continue;
        const std::string base_name = r.name.substr(0, r.name.rfind(' '));
        const auto kept = std::find_if(results.begin(), results.end(), [&](const ScheduleResult& k) {
            return k.name == base_name && k.recompute == RecomputeGranularity::none;
        });
        if (kept == results.end()) continue;
        const bool full = r.recompute == RecomputeGranularity::full;
        const double cut_target = full ? 5.0 : 2.0, time_target = full ? 1.4 : 1.1;
        const double cut = peak_of(*kept) / peak_of(r), time = r.ms_per_iter / kept->ms_per_iter;
        if (t.empty())
            t = fmt::format("{:<20} {:>13} {:>13} {:>12} {:>12}\n", "recomputed", "peak act MiB", "cut (target)",
                            "time x", "(target)");
        t += fmt::format("{:<20} {:>6.1f}/{:<6.1f} {:>6.2f}x (>={:.0f}) {:>11.3f}x {:>8}(<={:.1f}) {}\n", r.name, peak_of(r),
                         peak_of(*kept), cut, cut_target, time, "", time_target,
                         cut >= cut_target && time <= time_target ? "meets both" : "misses");
    }
    if (!t.empty())
        t += "peak act MiB: the largest stage's, recomputed / kept; cut = kept / recomputed; time x = ms/iter "
             "recomputed / kept\n";
    return t;
}

Report make_report(const BenchSchedulesFlags& f, const std::vector<ScheduleResult>& results, int stages,
                   bool over_mpi, int64_t parameters) {
    Report rep;
    const int64_t replicas = f.shape.data_parallel_size;
    rep.recompute_text = recompute_report(results);
    rep.title = fmt::format(
        "bench {}: model {} ({} parameters), {} stages{} {}, {} iterations of {} tokens ({} timed: the "
        "first {} not), {} data",
        f.command, f.model.preset, parameters, stages, replicas > 1 ? fmt::format(" x {} replicas", replicas) : "",
        !over_mpi ? "in one process"
        : replicas > 1 ? "over MPI (one rank per stage and replica)"
                       : "over MPI (one rank per stage)",
        f.iters,
        replicas * f.shape.micro_batch_size * f.shape.num_microbatches * f.shape.seq_length, f.iters - f.warmup_iters,
        f.warmup_iters,
        f.data.empty() ? "synthetic" : f.data);
    if (!over_mpi)
        rep.note = "note: in one process the stages run one after another, so tokens/s and the bubble are not a "
                   "parallel measurement (run under mpirun -np P for that)";
    std::string& t = rep.table_text;
    t += fmt::format("{:<20} {:>14} {:>10} {:>9} {:>9} {:>10}  {:<22} {:>10}", "schedule", "m x B", "tokens/s",
                     "ms/iter", "bubble", "sim bubble", "peak act MiB per stage", "final loss");
    t += replicas > 1 ? fmt::format(" {:>12}\n", "replica wait") : "\n";
    for (const auto& r : results) {
        t += fmt::format("{:<20} {:>14} {:>10.0f} {:>9.1f} {:>8.1f}% {:>9.1f}%  {:<22} {:>10.4f}",
                         r.name, fmt::format("{} x {}", r.num_microbatches, r.micro_batch_size),
                         r.tokens_per_s, r.ms_per_iter, 100 * r.bubble, 100 * r.sim_bubble, act_list(r.act_mib, " "),
                         r.final_loss);
        t += replicas > 1 ? fmt::format(" {:>11.1f}%\n", 100 * r.replica_wait) : "\n";
    }
    t += "sim bubble: the simulator's for the same plan at F = B = W (nobubble schedule)\n";
    if (replicas > 1)
        t += "replica wait: the share of the stages' wall time their optimizer steps waited for the replicas' "
             "gradient sum (replica 0's stages); m x B is per replica\n";
    const ScheduleResult *two_bw = find(results, ScheduleKind::two_bw), *one_f_one_b = find(results, ScheduleKind::one_f_one_b);
    if (two_bw && one_f_one_b) {
        const double ratio = two_bw->tokens_per_s / one_f_one_b->tokens_per_s;
        const auto m = static_cast<double>(f.shape.num_microbatches);
        const double ideal = (m + stages - 1) / m;
        rep.ratio_line = fmt::format("2bw / 1f1b tokens/s: {:.3f} (ideal (m + P - 1) / m = {:.3f})", ratio, ideal);
        rep.target_line = fmt::format("target: 2bw >= {:.2f} x 1f1b tokens/s: measured {:.3f} = {:.2f} x target",
                                      f.target, ratio, ratio / f.target);
    }
    return rep;
}

void write_file(const std::string& path, const std::string& text) {
    std::FILE* file = std::fopen(path.c_str(), "w");
    if (!file) throw RuntimeError(fmt::format("--out: cannot write '{}'", path));
    const bool ok = std::fwrite(text.data(), 1, text.size(), file) == text.size();
    if (std::fclose(file) != 0 || !ok) throw RuntimeError(fmt::format("--out: write to '{}' failed", path));
}

void write_outputs(const std::string& prefix, const Report& rep, const std::vector<ScheduleResult>& results,
                   int stages) {
    // New columns go last: run/compare.sh reads the columns by position.
    std::string csv = "schedule,num_microbatches,micro_batch_size,tokens_per_s,ms_per_iter,bubble_pct";
    for (int s = 0; s < stages; ++s) csv += fmt::format(",act_mib_stage{}", s);
    csv += ",final_loss,sim_bubble_pct,replica_wait_pct\n";
    for (const auto& r : results) {
        csv += fmt::format("{},{},{},{:.1f},{:.3f},{:.2f}", r.name, r.num_microbatches,
                           r.micro_batch_size, r.tokens_per_s, r.ms_per_iter, 100 * r.bubble);
        for (double a : r.act_mib) csv += fmt::format(",{:.3f}", a);
        csv += fmt::format(",{:.6f},{:.2f},{:.2f}\n", r.final_loss, 100 * r.sim_bubble, 100 * r.replica_wait);
    }
    write_file(prefix + ".csv", csv);

    std::string md = rep.title + "\n\n";
    if (!rep.note.empty()) md += rep.note + "\n\n";
    md += "| schedule | microbatches x sequences | tokens/s | ms/iter | bubble | sim bubble (F = B = W) | peak act MiB "
          "per stage | final loss | replica wait |\n";
    md += "|---|---|---:|---:|---:|---:|---|---:|---:|\n";
    for (const auto& r : results)
        md += fmt::format("| {} | {} x {} | {:.0f} | {:.1f} | {:.1f}% | {:.1f}% | {} | {:.4f} | {:.1f}% |\n",
                          r.name, r.num_microbatches, r.micro_batch_size, r.tokens_per_s, r.ms_per_iter,
                          100 * r.bubble, 100 * r.sim_bubble, act_list(r.act_mib, " / "), r.final_loss,
                          100 * r.replica_wait);
    if (!rep.ratio_line.empty()) md += "\n" + rep.ratio_line + "\n\n" + rep.target_line + "\n";
    if (!rep.recompute_text.empty()) md += "\n```\n" + rep.recompute_text + "```\n";
    write_file(prefix + ".md", md);
}

void validate(const BenchSchedulesFlags& f) {
    if (f.iters <= f.warmup_iters || f.warmup_iters < 0)
        throw UsageError(fmt::format("--iters {} must exceed --warmup-iters {} (>= 0)", f.iters, f.warmup_iters));
    if (f.schedules.empty()) throw UsageError("--schedules: give at least one schedule");
    check_run_shape(f.shape);
    const int world = mpi_world_size();
    if (f.shape.data_parallel_size > 1 && world == 1)
        throw UsageError(fmt::format("--data-parallel-size {} runs under mpirun -np P*{} (one rank per stage and "
                                     "replica)",
                                     f.shape.data_parallel_size, f.shape.data_parallel_size));
    if (!f.out.empty()) {
        const std::filesystem::path parent = std::filesystem::path(f.out).parent_path();
        if (!parent.empty() && !std::filesystem::is_directory(parent))
            throw UsageError(fmt::format("--out '{}': no directory '{}'", f.out, parent.string()));
    }
}

int run_bench_schedules(const BenchSchedulesFlags& f) {
    validate(f);
    const int world = mpi_world_size();
    const bool over_mpi = world > 1;
    const int stages = shape_for_world(f.shape, false, world).stages;  // under mpirun the ranks / D, which D divides
    // The names parsed and every plan checked before anything runs (the same UsageError on every rank).
    std::vector<ScheduleKind> schedules;
    for (const auto& name : f.schedules) schedules.push_back(parse_schedule_kind(name));
    std::vector<RecomputeGranularity> granularities;
    for (const auto& name : f.recompute) granularities.push_back(parse_recompute_granularity(name));
    const std::vector<BenchRow> rows = rows_of(f, schedules, granularities);
    for (const BenchRow& row : rows) {
        try {
            plan_for(f, row, f.data.empty() ? "-" : f.data, stages);
        } catch (const UsageError& e) {
            // A row with chunks cuts its own P x V parts: name it, as it may be the only row that does not fit.
            const bool chunked = row.schedule == ScheduleKind::zb_v || row.virtual_stages > 1;
            if (!chunked) throw;
            throw UsageError(fmt::format("--schedules {}: {}", schedule_kind_name(row.schedule), e.what()));
        }
    }

    std::unique_ptr<SyntheticCorpus> corpus;
    if (f.data.empty()) corpus = std::make_unique<SyntheticCorpus>(f.seed);
    const std::string data = corpus ? corpus->path() : f.data;
    std::FILE* quiet = std::fopen("/dev/null", "w");
    if (!quiet) throw RuntimeError("bench schedules: cannot open /dev/null");
    std::vector<ScheduleResult> results;
    int64_t parameters = 0;
    for (const BenchRow& row : rows) {
        const RunPlan plan = plan_for(f, row, data, stages);
        const std::optional<PipelineSummary> summary = run_pipeline_training(plan, quiet);
        if (!summary) continue;  // not stage 0
        results.push_back(result_of(plan.options, *summary, f.warmup_iters));
        SimCosts unit;
        unit.step_barrier = steps_synchronize(plan.schedule.kind);  // the global clip's all-gather
        const SimResult simulated = simulate(build_schedule(plan.schedule), unit, plan.schedule.placement());
        results.back().sim_bubble = simulated.bubble_fraction;
        if (parameters == 0)
            for (const ParamLayout& l : make_pipeline_setup(plan).layouts) parameters += l.trainable_numel();
    }
    std::fclose(quiet);
    if (mpi_world_rank() != 0) return 0;

    const Report rep = make_report(f, results, stages, over_mpi, parameters);
    fmt::print("{}\n", rep.title);
    if (!rep.note.empty()) fmt::print("{}\n", rep.note);
    fmt::print("{}", rep.table_text);
    if (!rep.ratio_line.empty()) fmt::print("{}\n{}\n", rep.ratio_line, rep.target_line);
    fmt::print("{}", rep.recompute_text);
    if (!f.out.empty()) {
        write_outputs(f.out, rep, results, stages);
        fmt::print("wrote {0}.csv and {0}.md\n", f.out);
    }
    return 0;
}

// `bench schedules`, or with `recompute_defaults` `bench recompute`: every granularity, tiny at seq 512 (the
// recomputation issue's yardstick), zb-v and interleaved 1F1B included.
CLI::App* add_schedule_bench(CLI::App& bench, std::shared_ptr<BenchSchedulesFlags> f, bool recompute_defaults) {
    if (recompute_defaults) {
        f->command = "recompute";
        f->recompute = {"none", "selective", "full"};
        f->model.preset = "tiny";
        f->shape.micro_batch_size = 2;
        f->shape.seq_length = 512;
        f->shape.virtual_stages = 2;
        f->iters = 5;
        f->warmup_iters = 1;
    }
    auto* sub = recompute_defaults
                    ? bench.add_subcommand("recompute", "Peak activation MiB and tokens/s of every schedule without "
                                                        "and with selective and full recomputation, in one run")
                    : bench.add_subcommand("schedules", "Tokens/s, measured bubble, activation memory and loss of every "
                                                        "schedule on one config (under mpirun: one stage per rank)");
    add_model_flags(*sub, f->model);
    sub->add_option("--data", f->data, "Training data (default: a synthetic corpus)");
    sub->add_option("--device", f->device, "cpu (f32 reference) or cuda (bf16 compute; under mpirun one GPU per rank)")
        ->capture_default_str();
    add_shape_flags(*sub, f->shape,
                    {{ShapeFlag::micro_batch_size, "pipedream: x m"},
                     {ShapeFlag::num_microbatches, "per step; pipedream: 1"},
                     {ShapeFlag::seq_length}});
    sub->add_option("--iters,--train-iters", f->iters, "Iterations per schedule")->capture_default_str();
    sub->add_option("--warmup-iters", f->warmup_iters, "First iterations run but not timed")->capture_default_str();
    add_shape_flags(*sub, f->shape,
                    {{ShapeFlag::stages, "in one process (under mpirun: the ranks / D)"},
                     {ShapeFlag::data_parallel_size, "of every schedule's pipeline (under mpirun -np P*D), m x B per "
                                                     "replica"}});
    add_cut_flags(*sub, f->cut);
    sub->add_option("--schedules", f->schedules, "Schedules to run, in order")->delimiter(',')->capture_default_str();
    add_shape_flag(*sub, f->shape,
                   {ShapeFlag::virtual_stages, "also run 1f1b interleaved with V chunks per stage, as a row "
                                               "'1f1b-vV' (1: not)"});
    sub->add_option("--lr", f->lr, "Learning rate (constant)")->capture_default_str();
    add_seed_flag(*sub, f->seed, "Seed for weights, data order and the synthetic corpus");
    sub->add_option("--out", f->out, "Also write the table as PREFIX.csv and PREFIX.md");
    sub->add_option("--target", f->target, "Target ratio of 2bw to 1f1b tokens/s")->capture_default_str();
    sub->add_option("--recompute", f->recompute,
                    "Run each schedule under each of these --recompute-granularity values (full: uniform, one block "
                    "per group), a row each")
        ->delimiter(',')
        ->capture_default_str();
    return sub;
}

}  // namespace

Command add_bench_schedules_command(CLI::App& bench) {
    auto f = std::make_shared<BenchSchedulesFlags>();
    return {add_schedule_bench(bench, f, false), [f] { return run_bench_schedules(*f); }};
}

Command add_bench_recompute_command(CLI::App& bench) {
    auto f = std::make_shared<BenchSchedulesFlags>();
    return {add_schedule_bench(bench, f, true), [f] { return run_bench_schedules(*f); }};
}

}  // namespace nb::cli

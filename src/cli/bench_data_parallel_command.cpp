// `nobubble bench data-parallel`: what D pipeline replicas gain (docs/DESIGN.md section 2, "Data parallelism").
// Under `mpirun -np P*D` it runs one config with --data-parallel-size D over every rank, and reports tokens/s, the
// measured bubble and the share of the stages' wall time their optimizer steps spent waiting for the replicas'
// gradient sum (the reduction left exposed: StageReport::replica_wait_s, measured on replica 0's stages).
//
// Yardstick, in the same run: with P = 1, the same replica alone (D = 1, the same m and B, so 1/D of the tokens
// per iteration) on rank 0, one CPU thread like every rank of the D run, while the other ranks wait. Their
// tokens/s ratio against D is the scaling efficiency; its target is 1.8 at D = 2 (the issue's, on 2 cores). With
// P > 1 there is no yardstick here (D = 1 needs a job of P ranks: run `bench schedules` under mpirun -np P).
// Where the ranks outnumber the cores they share them, and the output says so.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "src/cli/commands.h"
#include "src/cli/synthetic_corpus.h"
#include "src/core/error.h"
#include "src/core/mpi_env.h"
#include "src/cpu/cpu_threads.h"
#include "src/plan/run_shape.h"
#include "src/run/cut_memory.h"
#include "src/run/pipeline_driver.h"

namespace nb::cli {

namespace {

struct BenchDataParallelFlags {
    ModelFlags model;
    std::string data;  // empty: a synthetic corpus
    std::string schedule = "1f1b";
    // P (D = the ranks / P), B, m per replica, T.
    RunShape shape{.micro_batch_size = 4, .num_microbatches = 4, .seq_length = 128};
    int64_t iters = 12;
    int64_t warmup_iters = 2;
    double lr = 1e-3;
    uint64_t seed = 1234;
    double target = 1.8;
};

struct Measured {
    int replicas = 0, ranks = 0;
    double tokens_per_s = 0, ms_per_iter = 0, bubble = 0, replica_wait = 0, final_loss = 0;
};

TrainOptions options_for(const BenchDataParallelFlags& f, const std::string& data, int replicas) {
    TrainOptions o;
    o.model = resolve_model(f.model);
    o.data_path = data;
    o.val_fraction = 0;  // training only
    o.set_shape(f.shape);
    o.data_parallel_size = replicas;
    o.train_iters = f.iters;
    o.lr.lr = f.lr;
    o.lr.decay_style = LrDecayStyle::constant;
    o.seed = f.seed;
    o.log_interval = f.iters;
    o.schedule = parse_schedule_kind(f.schedule);
    return o;
}

// The timed iterations' figures, from rank 0's summary: the stages' busy, wall and replica-wait seconds summed.
Measured measured(const TrainOptions& o, const PipelineSummary& s, int64_t warmup) {
    Measured m;
    m.replicas = o.data_parallel_size;
    m.ranks = o.stages * o.data_parallel_size;
    double seconds = 0, busy = 0, wall = 0, waited = 0;
    for (size_t t = static_cast<size_t>(warmup); t < s.iterations.size(); ++t) {
        const IterationTiming& it = s.iterations[t];
        seconds += it.seconds;
        for (size_t k = 0; k < it.busy_s.size(); ++k)
            busy += it.busy_s[k], wall += it.wall_s[k], waited += it.replica_wait_s[k];
    }
    const auto timed = static_cast<double>(static_cast<int64_t>(s.iterations.size()) - warmup);
    m.tokens_per_s = static_cast<double>(o.tokens_per_iter()) * timed / seconds;
    m.ms_per_iter = 1e3 * seconds / timed;
    m.bubble = wall > 0 ? 1.0 - busy / wall : 0.0;
    m.replica_wait = wall > 0 ? waited / wall : 0.0;
    m.final_loss = s.run.final_train_loss;
    return m;
}

// The yardstick: one replica on rank 0 alone, in this process, one CPU thread; the other ranks wait for it.
std::optional<Measured> run_yardstick(const BenchDataParallelFlags& f, const std::string& data, std::FILE* quiet) {
    std::optional<Measured> m;
    if (mpi_world_rank() == 0) {
        const RunPlan plan = make_run_plan(options_for(f, data, 1), run_memory_fits(options_for(f, data, 1)));
        if (!std::getenv("OPENBLAS_NUM_THREADS")) cpu::set_thread_count(1);
        m = measured(plan.options, run_in_process(make_pipeline_setup(plan), nullptr, quiet), f.warmup_iters);
    }
    mpi_min_over_ranks(0);  // the other ranks wait here until rank 0 is done
    return m;
}

std::string row(const Measured& m) {
    return fmt::format("{:>3} {:>6} {:>10.0f} {:>9.1f} {:>8.1f}% {:>13.1f}% {:>10.4f}\n", m.replicas, m.ranks,
                       m.tokens_per_s, m.ms_per_iter, 100 * m.bubble, 100 * m.replica_wait, m.final_loss);
}

int run_bench_data_parallel(const BenchDataParallelFlags& f) {
    if (f.iters <= f.warmup_iters || f.warmup_iters < 0)
        throw UsageError(fmt::format("--iters {} must exceed --warmup-iters {} (>= 0)", f.iters, f.warmup_iters));
    check_run_shape(f.shape);
    const int world = mpi_world_size();
    if (world % f.shape.stages != 0 || world / f.shape.stages < 2)
        throw UsageError(fmt::format("bench data-parallel runs under mpirun -np P*D with D >= 2 replicas of --stages "
                                     "{}: {} rank(s) given",
                                     f.shape.stages, world));
    const int replicas = world / f.shape.stages;
    const TrainOptions o = options_for(f, f.data.empty() ? "-" : f.data, replicas);
    make_run_plan(o, run_memory_fits(o));  // a bad config: the same UsageError on every rank, before anything runs

    std::unique_ptr<SyntheticCorpus> corpus;
    if (f.data.empty()) corpus = std::make_unique<SyntheticCorpus>(f.seed);
    const std::string data = corpus ? corpus->path() : f.data;
    std::FILE* quiet = std::fopen("/dev/null", "w");
    if (!quiet) throw RuntimeError("bench data-parallel: cannot open /dev/null");
    const std::optional<Measured> alone = f.shape.stages == 1 ? run_yardstick(f, data, quiet) : std::nullopt;
    const RunPlan plan = make_run_plan(options_for(f, data, replicas), run_memory_fits(o));
    const std::optional<PipelineSummary> summary = run_pipeline_training(plan, quiet);
    std::fclose(quiet);
    if (!summary) return 0;  // not rank 0

    const Measured with = measured(plan.options, *summary, f.warmup_iters);
    const unsigned cores = std::thread::hardware_concurrency();
    fmt::print("bench data-parallel: --schedule {} on {} stage(s) x {} replicas ({} ranks on {} cores{}), model {}, "
               "{} iterations of m = {} x B = {} x {} tokens per replica ({} timed), {} data\n",
               f.schedule, f.shape.stages, replicas, world, cores,
               world > static_cast<int>(cores) ? ", oversubscribed" : "", f.model.preset, f.iters,
               f.shape.num_microbatches, f.shape.micro_batch_size, f.shape.seq_length, f.iters - f.warmup_iters,
               f.data.empty() ? "synthetic" : f.data);
    fmt::print("{:>3} {:>6} {:>10} {:>9} {:>9} {:>14} {:>10}\n", "D", "ranks", "tokens/s", "ms/iter", "bubble",
               "replica wait", "final loss");
    if (alone) fmt::print("{}", row(*alone));
    fmt::print("{}", row(with));
    fmt::print("replica wait: the share of the stages' wall time their optimizer steps waited for the replicas' "
               "gradient sum (replica 0's stages)\n");
    if (alone) {
        const double ratio = with.tokens_per_s / alone->tokens_per_s;
        fmt::print("D = {} / D = 1 tokens/s: {:.3f} (ideal {})\n", replicas, ratio, replicas);
        fmt::print("target: >= {:.2f} x: measured {:.3f} = {:.2f} x target\n", f.target, ratio, ratio / f.target);
    } else {
        fmt::print("no yardstick at P > 1 (D = 1 needs its own job: bench schedules under mpirun -np {})\n",
                   f.shape.stages);
    }
    return 0;
}

}  // namespace

Command add_bench_data_parallel_command(CLI::App& bench) {
    auto f = std::make_shared<BenchDataParallelFlags>();
    auto* sub = bench.add_subcommand("data-parallel",
                                     "Tokens/s of D pipeline replicas against one, and the exposed gradient "
                                     "reduction (under mpirun -np P*D)");
    add_model_flags(*sub, f->model);
    sub->add_option("--data", f->data, "Training data (default: a synthetic corpus)");
    sub->add_option("--schedule", f->schedule, "Pipeline schedule")->capture_default_str();
    add_shape_flags(*sub, f->shape,
                    {{ShapeFlag::stages, "the replicas are the ranks / P"},
                     {ShapeFlag::micro_batch_size},
                     {ShapeFlag::num_microbatches, "per replica and step"},
                     {ShapeFlag::seq_length}});
    sub->add_option("--iters,--train-iters", f->iters, "Iterations per run")->capture_default_str();
    sub->add_option("--warmup-iters", f->warmup_iters, "First iterations run but not timed")->capture_default_str();
    sub->add_option("--lr", f->lr, "Learning rate (constant)")->capture_default_str();
    add_seed_flag(*sub, f->seed, "Seed for weights, data order and the synthetic corpus");
    sub->add_option("--target", f->target, "Target ratio of D replicas' tokens/s to one's (P = 1)")
        ->capture_default_str();
    return {sub, [f] { return run_bench_data_parallel(*f); }};
}

}  // namespace nb::cli

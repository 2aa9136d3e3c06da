#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include <fmt/format.h>

#include "src/core/job_failure.h"
#include "src/core/mpi_env.h"
#include "src/plan/rank_layout.h"
#include "src/run/backend.h"
#include "src/core/error.h"
#include "src/cpu/cpu_threads.h"
#include "pipeline/transport/chunk_transport.h"
#include "pipeline/transport/mpi_transport.h"
#include "pipeline/transport/host_staged_transport.h"
#ifdef NOBUBBLE_HAVE_CUDA
#include "pipeline/transport/nccl_replica_sum.h"
#include "pipeline/transport/nccl_transport.h"
#endif
#include "src/run/pipeline_driver.h"
#include "src/run/progress_collector.h"
#include "src/run/watchdog.h"
#include "pipeline/stage/stage_memory.h"
#include "pipeline/stage/stage_runner.h"

namespace nb {

namespace {

// With one rank per stage, the ranks are the parallelism: CPU threads on top would oversubscribe the cores.
void one_cpu_thread_per_rank() {
    if (!std::getenv("OPENBLAS_NUM_THREADS")) cpu::set_thread_count(1);
}

// What a rank builds before the run, besides its backend and transport: its runner (which opens the data), or
// with V > 1 chunks one runner per chunk (its stage: setup.stage_of_chunk) over its own ChunkTransport
// (pipeline/transport/chunk_transport.h), and on rank 0 the collector of the reports (which opens --metrics) and
// the --save directory's lock, held for the whole job.
struct RankStage {
    std::unique_ptr<ChunkHub> hub;                             // V > 1 only
    std::vector<std::unique_ptr<Transport>> chunk_transports;  // V > 1 only, by chunk
    std::unique_ptr<ComputeTurns> turns;                       // V > 1 only: the rank's order of computes
    std::vector<std::unique_ptr<StageRunner>> runners;         // by chunk
    std::unique_ptr<ProgressCollector> collector;
    std::optional<SaveDirLock> save_lock;

    bool done() const {
        for (const auto& r : runners)
            if (!r->done()) return false;
        return !collector || collector->done();
    }
};

// The transport of chunk c's stage: the rank's own, or with V > 1 the chunk's.
Transport& transport_of(RankStage& rs, Transport& rank_transport, int chunk) {
    return rs.chunk_transports.empty() ? rank_transport : *rs.chunk_transports[static_cast<size_t>(chunk)];
}

// The one line of this rank's failure: "rank R (stage S): what".
std::string rank_error_line(const RankLayout& layout, const std::string& what) {
    return fmt::format("{}: {}", layout.describe(mpi_world_rank()), what);
}

// Errors while setting up (a data file, the device) are usually every rank's alike. Agreeing on them in a
// collective that every rank reaches lets one rank report them, the first that failed, and every rank exit
// cleanly with that rank's exit code: one line instead of one per rank. (A rank that failed before it, and so
// never comes, is heard of in the collective's wait: src/core/job_failure.h.)
void agree_on_setup(const RankLayout& layout, int exit_code, const std::string& error) {
    const std::vector<int> codes = mpi_gather_to_all(exit_code);
    auto first = std::find_if(codes.begin(), codes.end(), [](int c) { return c != 0; });
    if (first == codes.end()) return;
    if (first - codes.begin() == mpi_world_rank()) print_error_line(rank_error_line(layout, error));
    throw ReportedElsewhere(*first, "reported by the first rank that failed");
}

// Runs one step of the set-up on every rank, then agrees on its errors (agree_on_setup).
template <typename Step>
void set_up_step(const RankLayout& layout, Step&& step) {
    int exit_code = 0;
    std::string error;
    try {
        step();
    } catch (const UsageError& e) {
        exit_code = kExitUsage, error = e.what();
    } catch (const std::exception& e) {
        exit_code = kExitRuntime, error = error_text(e);
    }
    agree_on_setup(layout, exit_code, error);
}

// This rank failed mid-run, and the other ranks may be waiting for it: it tells them (they end at their next
// wait), prints its line unless a lower rank failed too, and ends (abort() does not return).
[[noreturn]] void end_after_failure(Transport& transport, const std::string& line, std::FILE* log) {
    std::fflush(log);
    transport.abort(report_this_rank_failed(kExitRuntime, line));
    std::abort();  // not reached (a virtual call does not carry [[noreturn]] to the compiler)
}

// --watchdog-s: this rank waited too long for a peer that may be dead or wedged, as the other ranks may too.
[[noreturn]] void end_by_watchdog(const RankLayout& layout, Transport& transport, const Watchdog& watchdog,
                                  const std::string& waits_for, std::FILE* log) {
    end_after_failure(transport, watchdog_message(layout.describe(mpi_world_rank()), watchdog.limit_s(), waits_for),
                      log);
}

// Another rank failed and said so (src/core/job_failure.h): this one ends with its exit code, printing nothing.
void end_if_another_rank_failed(Transport& transport, std::FILE* log) {
    if (const std::optional<int> code = another_rank_failed()) {
        std::fflush(log);
        transport.abort(*code);
    }
}

// The origin of every stage's clock, after the setup's collective (so every rank is here, give or take its exit
// skew): rank 0's wall-clock time now, broadcast, and each rank's steady clock read at that wall-clock instant.
// Ranks on one node read the same kernel clocks, so their origins agree to within a microsecond or so; across
// nodes, to within the nodes' clock synchronisation (NTP: about a millisecond). Taking each rank's own instant
// after the collective instead would be off by however long a busy machine kept a rank from running (tens of
// ms seen on 2 loaded cores). The clocks only time; nothing computed depends on them.
StageClock::Clock::time_point common_origin() {
    using namespace std::chrono;
    const int64_t origin_ns =
        mpi_broadcast_from_rank0(duration_cast<nanoseconds>(system_clock::now().time_since_epoch()).count());
    const auto wall_ns = [] { return duration_cast<nanoseconds>(system_clock::now().time_since_epoch()).count(); };
    // The steady clock at the wall-clock instant between two wall readings; of a few tries the tightest (a rank
    // descheduled between the readings would be off by as long).
    StageClock::Clock::time_point best_steady{};
    int64_t best_wall = 0, best_gap = INT64_MAX;
    for (int i = 0; i < 5; ++i) {
        const int64_t before = wall_ns();
        const auto steady = StageClock::Clock::now();
        const int64_t after = wall_ns();
        if (after - before < best_gap) best_gap = after - before, best_steady = steady, best_wall = before + (after - before) / 2;
    }
    return best_steady - duration_cast<StageClock::Clock::duration>(nanoseconds(best_wall - origin_ns));
}

// This rank's transports: its pipeline's (stage = the rank's stage in its replica) and, with D > 1 replicas,
// its stage's replicas' (stage = the replica), laid out by RankLayout (src/plan/rank_layout.h). On GPUs with
// D > 1, also the NCCL communicators of the stage's replicas (one per chunk), over which the gradient is summed.
struct RankTransports {
    RankLayout layout;
    std::unique_ptr<Transport> pipeline;
    std::unique_ptr<Transport> replicas;  // D > 1 only
#ifdef NOBUBBLE_HAVE_CUDA
    std::vector<std::unique_ptr<NcclReplicaGroup>> replica_groups;  // --device cuda with D > 1 only, by chunk
#endif

    // How chunk `chunk` sums its gradient over the replicas: null for messages over `replicas` (the CPU).
    std::unique_ptr<ReplicaSum> replica_sum(int chunk, Ops& ops) {
#ifdef NOBUBBLE_HAVE_CUDA
        if (!replica_groups.empty()) return make_nccl_replica_sum(*replica_groups.at(static_cast<size_t>(chunk)), ops);
#endif
        (void)chunk, (void)ops;
        return nullptr;
    }

    // Blocks until either may have progressed, or for at most `limit`. Both are polled in short turns: what one
    // waits on, the other does not see (MPI's progress engine turns for both whichever is polled).
    void wait_for_progress(std::chrono::milliseconds limit) {
        if (!replicas) {
            pipeline->wait_for_progress(limit);
            return;
        }
        const auto deadline = std::chrono::steady_clock::now() + limit;
        const auto turn = std::chrono::milliseconds(1);
        do {
            if (pipeline->wait_for_progress(std::min(turn, limit)) || replicas->wait_for_progress(std::chrono::milliseconds(0)))
                return;
        } while (std::chrono::steady_clock::now() < deadline);
    }
    void finish() {
        pipeline->finish();
        if (replicas) replicas->finish();
    }
};

// The backend, where the transport does not need it first (the CPU), the memory check, rank 0's claim of --save
// DIR, then the runner (restored from the checkpoint when resuming) and collector (on rank 0: stage 0 of
// replica 0).
RankStage set_up(const PipelineSetup& setup, const ResumePoint* resume, RankTransports& transports,
                 std::unique_ptr<Ops>& ops, std::FILE* log) {
    RankStage rs;
    Transport& transport = *transports.pipeline;
    const RankLayout& layout = transports.layout;
    const int rank = transport.stage(), chunks = setup.chunks_per_rank();
    const bool job_rank0 = mpi_world_rank() == 0;
    // Every rank's stages must fit before any rank allocates its own (pipeline/stage/stage_memory.h): a usage error.
    set_up_step(layout, [&] {
        if (!ops) ops = make_ops(setup.options.device);
        require_memory_fits(rank, 1, estimate_rank_memory(setup, rank, ops->activation_dtype()),
                            ops->available_memory());
    });
    // --save DIR: rank 0 claims it for the job (locked, room for a checkpoint of every stage) before any rank
    // runs a step; its error ends every rank alike, none waiting for another.
    set_up_step(layout, [&] {
        if (job_rank0)
            rs.save_lock = claim_save_dir(
                setup.options, [&] { return estimate_checkpoint_bytes(setup, ops->activation_dtype()); });
    });
    set_up_step(layout, [&] {
        if (chunks > 1) {
            rs.hub = std::make_unique<ChunkHub>(transport, ChunkStages(setup.spec.placement().table()));
            rs.chunk_transports = make_chunk_transports(*rs.hub);
            rs.turns = std::make_unique<ComputeTurns>(setup.rank_actions(rank));
        }
        for (int c = 0; c < chunks; ++c) {
            Transport& t = transport_of(rs, transport, c);
            rs.runners.push_back(std::make_unique<StageRunner>(setup, t.stage(), t, *ops, transports.replicas.get(),
                                                               transports.replica_sum(c, *ops)));
            if (rs.turns) rs.runners.back()->follow_turns(*rs.turns);
            prepare_runner(*rs.runners.back(), setup, resume);
        }
        if (job_rank0)
            rs.collector = std::make_unique<ProgressCollector>(setup, transport_of(rs, transport, 0),
                                                               rs.runners[0]->stop_vote(), log,
                                                               resume ? resume->saved.elapsed_s : 0.0);
    });
    const auto origin = common_origin();
    for (auto& r : rs.runners) r->start_clock(origin);
    return rs;
}

#ifdef NOBUBBLE_HAVE_CUDA
// --device cuda: every rank starts its GPU (CudaOps picks it from the local rank), and the ranks agree that all
// of them did BEFORE any NCCL call: NCCL's set-up is collective, and a rank without a GPU would leave the
// others waiting inside it, where no message reaches them.
std::unique_ptr<Ops> start_gpus(const PipelineSetup& setup, const RankLayout& layout) {
    std::unique_ptr<Ops> ops;
    set_up_step(layout, [&] { ops = make_ops(setup.options.device); });
    return ops;
}

// A failure in NCCL's set-up (after every GPU started) may leave the other ranks inside NCCL, where no notice
// reaches them: this rank reports it and ends; its MPI_Finalize cannot complete, so its deadline _exits it
// (src/core/job_failure.h) and mpirun ends the ranks left inside NCCL.
template <typename Make>
auto or_end_the_job(const RankLayout& layout, std::FILE* log, Make&& make) {
    try {
        return make();
    } catch (const std::exception& e) {
        std::fflush(log);
        end_process_after_failure(report_this_rank_failed(kExitRuntime, rank_error_line(layout, error_text(e))));
    }
}

// --device cuda: the pipeline over NCCL and, with D > 1, the replicas' NCCL groups split from the same NCCL
// world (pipeline/transport/nccl_replica_sum.h); the replicas' other messages go through the host.
void over_nccl(const PipelineSetup& setup, RankTransports& t, Ops& gpu, std::FILE* log) {
    const int rank = mpi_world_rank();
    if (t.layout.replicas == 1) {
        t.pipeline = or_end_the_job(t.layout, log, [&] { return make_nccl_transport(std::move(t.pipeline), gpu); });
        return;
    }
    NcclJobComms comms = or_end_the_job(t.layout, log, [&] {
        return make_nccl_job_comms(gpu, t.layout.stage_of(rank), t.layout.pipeline_ranks, t.layout.replica_of(rank),
                                   t.layout.replicas, setup.chunks_per_rank());
    });
    t.pipeline = or_end_the_job(
        t.layout, log, [&] { return make_nccl_transport(std::move(t.pipeline), gpu, std::move(comms.links)); });
    t.replica_groups = std::move(comms.groups);
    t.replicas = make_host_staged_transport(std::move(t.replicas), Device::cuda);
}
#endif

// How this run's stages talk: MPI moves host tensors (the CPU backend); on GPUs, NCCL moves the device
// tensors between neighbours and MPI the rest. Starts the GPU backend into `ops` where NCCL needs it first.
// With D > 1 replicas the job's ranks split into D pipelines and, across them, P replica groups.
RankTransports make_transports(const PipelineSetup& setup, std::unique_ptr<Ops>& ops, std::FILE* log) {
    RankTransports t;
    t.layout = {setup.num_ranks(), setup.options.data_parallel_size};
    const int rank = mpi_world_rank();
    if (t.layout.replicas > 1) {
        t.pipeline = make_mpi_transport_of_color(t.layout.replica_of(rank));
        t.replicas = make_mpi_transport_of_color(t.layout.stage_of(rank));
    } else {
        t.pipeline = make_mpi_transport();
    }
    if (setup.options.device != Device::cuda) return t;
#ifdef NOBUBBLE_HAVE_CUDA
    ops = start_gpus(setup, t.layout);
    over_nccl(setup, t, *ops, log);
#else
    (void)ops, (void)log;  // set_up's make_ops reports that this nobubble has no CUDA, on every rank alike
#endif
    return t;
}

// The event loop of one rank: advance while possible, else wait for a message.
// With several chunks the rank tries them round-robin, each as far as its own list and the rank's turns let it
// (pipeline/stage/compute_turns.h: the computes in the order of the rank's merged list).
std::optional<PipelineSummary> run_stage(const PipelineSetup& setup, RankTransports& transports, const Ops& ops,
                                         RankStage& rs, std::FILE* log) {
    ProgressCollector* collector = rs.collector.get();
    const char* where = ops.device() == Device::cuda ? "over NCCL and MPI" : "over MPI";
    if (collector) print_pipeline_header(log, setup, where, ops.device(), rs.runners[0]->train_windows());
    Watchdog watchdog(setup.options.watchdog_s);
    while (!rs.done()) {
        bool moved = false;
        for (auto& runner : rs.runners) moved |= runner->try_advance();
        if (collector) moved |= collector->poll();
        if (moved) {
            watchdog.progressed();
            continue;
        }
        end_if_another_rank_failed(*transports.pipeline, log);
        if (watchdog.idle())
            end_by_watchdog(transports.layout, *transports.pipeline, watchdog, rank_waits_for(rs.runners, collector),
                            log);
        transports.wait_for_progress(watchdog.wait_limit());
    }
    transports.finish();
    if (!collector) return std::nullopt;
    return pipeline_summary(*collector, setup, ops.activation_dtype());
}

}  // namespace

std::optional<PipelineSummary> run_over_mpi(const PipelineSetup& setup, const ResumePoint* resume, std::FILE* log) {
    one_cpu_thread_per_rank();
    // Declared in this order so that they end in the reverse one: the stage, then the transports (whose NCCL
    // streams and buffers live on the backend's GPU), then the backend.
    std::unique_ptr<Ops> ops;
    // Every rank meets here first: one that failed before (its flags, its plan, its checkpoint) is heard of
    // before any rank enters the transports' blocking set-up (communicator splits), where none could hear it.
    mpi_wait_for_every_rank("the pipeline's set-up");
    RankTransports transports = make_transports(setup, ops, log);
    RankStage rs = set_up(setup, resume, transports, ops, log);
    try {
        return run_stage(setup, transports, *ops, rs, log);
    } catch (const std::exception& e) {
        end_after_failure(*transports.pipeline, rank_error_line(transports.layout, error_text(e)), log);
    }
}

}  // namespace nb

#include "src/core/mpi_env.h"

#ifdef NOBUBBLE_HAVE_MPI

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "src/core/error.h"
#include "src/core/job_failure.h"

namespace nb {

namespace {

bool session_initialized = false;
int thread_level = 0;

// Set by Open MPI's mpirun, by PMIx launchers (Open MPI, srun --mpi=pmix) and by PMI ones (MPICH's hydra, srun
// --mpi=pmi2).
bool started_by_launcher() {
    for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"})
        if (std::getenv(name)) return true;
    return false;
}

bool wants_mpi() {
    const char* forced = std::getenv("NOBUBBLE_MPI");
    if (forced && std::strcmp(forced, "1") == 0) return true;
    if (forced && std::strcmp(forced, "0") == 0) return false;
    return started_by_launcher();
}

}  // namespace

MpiSession::MpiSession(int& argc, char**& argv) {
    if (!wants_mpi()) return;
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
    thread_level = provided;
    session_initialized = true;
    start_failure_notices();
}

MpiSession::~MpiSession() {
    if (!session_initialized) return;
    end_failure_notices();
    MPI_Finalize();
    session_initialized = false;
}

bool mpi_initialized() { return session_initialized; }

bool mpi_threads_serialized() { return session_initialized && thread_level >= MPI_THREAD_SERIALIZED; }

int mpi_world_size() {
    int size = 1;
    if (session_initialized) MPI_Comm_size(MPI_COMM_WORLD, &size);
    return size;
}

int mpi_world_rank() {
    int rank = 0;
    if (session_initialized) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    return rank;
}

namespace {

// Waits for a started collective by polling it (under mpi_call_mutex(), released between polls, so that a
// transport's progress helper may run): ends early when another rank announced a failure, and fails after the
// watchdog's limit of waiting. As with the pipeline's watchdog (src/run/watchdog.h), time the process spent
// stopped is not waiting: a gap of over 2 s between two polls adds nothing.
void wait_guarded(MPI_Request& request, const char* what) {
    using Clock = std::chrono::steady_clock;
    constexpr auto kLongestGap = std::chrono::seconds(2);
    const double limit_s = wait_limit_s();
    double waited_s = 0;
    auto last = Clock::now();
    auto pause = std::chrono::microseconds(20);
    for (;;) {
        int done = 0;
        {
            std::lock_guard lock(mpi_call_mutex());
            MPI_Test(&request, &done, MPI_STATUS_IGNORE);
        }
        if (done) return;
        if (const std::optional<int> code = another_rank_failed())
            throw ReportedElsewhere(*code, "another rank failed");
        const auto now = Clock::now();
        if (now - last < kLongestGap) waited_s += std::chrono::duration<double>(now - last).count();
        last = now;
        if (limit_s > 0 && waited_s >= limit_s)
            throw RuntimeError(fmt::format("watchdog: rank {} waited {:g} s for every rank to reach {}; a rank never "
                                           "came (stopped or wedged?)",
                                           mpi_world_rank(), limit_s, what));
        std::this_thread::sleep_for(pause);
        pause = std::min(pause * 2, std::chrono::microseconds(1000));
    }
}

// Starts a non-blocking collective (`start` fills the request, under mpi_call_mutex()) and waits for it guarded.
template <typename Start>
void run_guarded(const char* what, Start&& start) {
    MPI_Request request;
    {
        std::lock_guard lock(mpi_call_mutex());
        start(&request);
    }
    wait_guarded(request, what);
}

}  // namespace

long long mpi_min_over_ranks(long long value) {
    if (!session_initialized) return value;
    long long least = value;
    run_guarded("the memory check", [&](MPI_Request* r) {
        MPI_Iallreduce(&value, &least, 1, MPI_LONG_LONG, MPI_MIN, MPI_COMM_WORLD, r);
    });
    return least;
}

std::vector<int> mpi_gather_to_all(int value) {
    if (!session_initialized) return {value};
    std::vector<int> all(static_cast<size_t>(mpi_world_size()));
    run_guarded("the set-up's agreement", [&](MPI_Request* r) {
        MPI_Iallgather(&value, 1, MPI_INT, all.data(), 1, MPI_INT, MPI_COMM_WORLD, r);
    });
    return all;
}

int64_t mpi_broadcast_from_rank0(int64_t value) {
    if (!session_initialized) return value;
    run_guarded("the clocks' common origin",
                [&](MPI_Request* r) { MPI_Ibcast(&value, 1, MPI_INT64_T, 0, MPI_COMM_WORLD, r); });
    return value;
}

void mpi_wait_for_every_rank(const char* what) {
    if (!session_initialized) return;
    run_guarded(what, [](MPI_Request* r) { MPI_Ibarrier(MPI_COMM_WORLD, r); });
}

}  // namespace nb

#else  // built without MPI: one process, rank 0 of 1

namespace nb {

MpiSession::MpiSession(int&, char**&) {}
MpiSession::~MpiSession() = default;
bool mpi_initialized() { return false; }
bool mpi_threads_serialized() { return false; }
int mpi_world_size() { return 1; }
int mpi_world_rank() { return 0; }
long long mpi_min_over_ranks(long long value) { return value; }
std::vector<int> mpi_gather_to_all(int value) { return {value}; }
int64_t mpi_broadcast_from_rank0(int64_t value) { return value; }
void mpi_wait_for_every_rank(const char*) {}

}  // namespace nb

#endif

namespace nb {

std::mutex& mpi_call_mutex() {
    static std::mutex m;
    return m;
}

}  // namespace nb

#include "src/core/job_failure.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

#include <fmt/format.h>

#include "src/core/mpi_env.h"

namespace nb {

void print_error_line(const std::string& line) {
    std::fflush(stdout);
    fmt::print(stderr, "nobubble: error: {}\n", line);
    std::fflush(stderr);
}

}  // namespace nb

#ifdef NOBUBBLE_HAVE_MPI

#include <mpi.h>

#include <mutex>
#include <unistd.h>
#include <vector>

namespace nb {

namespace {

enum NoticeTag : int { kFailedTag = 1, kWellTag = 2 };
enum class Heard { nothing, well, failed };

struct Notices {
    MPI_Comm comm = MPI_COMM_NULL;
    std::vector<Heard> heard;       // by rank: what it told this one
    std::vector<int> codes;         // by rank: the exit code it failed with
    bool told_failed = false;       // this rank sent "failed"
    bool told_well = false;         // this rank sent "well"
    std::optional<int> ending_code;  // the code this process ends with, once a failure is known
};

Notices notices;
std::atomic<double> limit_s{300.0};

bool notices_active() { return notices.comm != MPI_COMM_NULL && notices.heard.size() > 1; }

// Sends `value` under `tag` to every other rank without waiting: the message is one int, which MPI sends
// eagerly, and the request is freed at once (MPI completes it on its own). The value lives in static storage.
void tell_every_rank(NoticeTag tag, int value) {
    static int values[3];
    values[tag] = value;
    const int me = mpi_world_rank();
    for (int rank = 0; rank < static_cast<int>(notices.heard.size()); ++rank) {
        if (rank == me) continue;
        MPI_Request request;
        MPI_Isend(&values[tag], 1, MPI_INT, rank, tag, notices.comm, &request);
        MPI_Request_free(&request);
    }
}

// Receives every notice that has arrived (the caller holds mpi_call_mutex()).
void take_arrived_notices() {
    for (;;) {
        int arrived = 0;
        MPI_Status status;
        MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, notices.comm, &arrived, &status);
        if (!arrived) return;
        int value = 0;
        MPI_Recv(&value, 1, MPI_INT, status.MPI_SOURCE, status.MPI_TAG, notices.comm, MPI_STATUS_IGNORE);
        const auto from = static_cast<size_t>(status.MPI_SOURCE);
        if (status.MPI_TAG == kFailedTag) {
            notices.heard[from] = Heard::failed;
            notices.codes[from] = value;
        } else if (notices.heard[from] == Heard::nothing) {
            notices.heard[from] = Heard::well;
        }
    }
}

// The lowest rank below `below` that said it failed, if any.
std::optional<int> lowest_failed_rank(int below) {
    for (int rank = 0; rank < below; ++rank)
        if (notices.heard[static_cast<size_t>(rank)] == Heard::failed) return rank;
    return std::nullopt;
}

bool every_rank_below_answered(int below) {
    for (int rank = 0; rank < below; ++rank)
        if (notices.heard[static_cast<size_t>(rank)] == Heard::nothing) return false;
    return true;
}

// Past the deadline the process ends without MPI_Finalize (a peer that cannot join would hold it forever).
void arm_finalize_deadline(int exit_code) {
    std::thread([exit_code] {
        std::this_thread::sleep_for(std::chrono::milliseconds(kFinalizeDeadlineMs));
        std::fflush(stdout);
        std::fflush(stderr);
        _exit(exit_code);
    }).detach();
}

}  // namespace

void start_failure_notices() {
    MPI_Comm_dup(MPI_COMM_WORLD, &notices.comm);
    const auto size = static_cast<size_t>(mpi_world_size());
    notices.heard.assign(size, Heard::nothing);
    notices.codes.assign(size, 0);
}

void end_failure_notices() {
    if (notices.ending_code) {
        arm_finalize_deadline(*notices.ending_code);
        return;  // notices may still be in flight: the communicator goes with MPI_Finalize
    }
    if (notices.comm != MPI_COMM_NULL) MPI_Comm_free(&notices.comm);
}

int report_this_rank_failed(int exit_code, const std::string& line) {
    if (!notices_active()) {
        print_error_line(line);
        return exit_code;
    }
    const int me = mpi_world_rank();
    {
        std::lock_guard lock(mpi_call_mutex());
        if (!notices.told_failed) tell_every_rank(kFailedTag, exit_code);
        notices.told_failed = true;
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kAgreeMs);
    for (;;) {
        {
            std::lock_guard lock(mpi_call_mutex());
            take_arrived_notices();
        }
        if (every_rank_below_answered(me) || std::chrono::steady_clock::now() >= deadline) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    const std::optional<int> lower = lowest_failed_rank(me);
    const int code = lower ? notices.codes[static_cast<size_t>(*lower)] : exit_code;
    if (!lower) print_error_line(line);
    notices.ending_code = code;
    return code;
}

std::optional<int> another_rank_failed() {
    if (!notices_active()) return std::nullopt;
    std::lock_guard lock(mpi_call_mutex());
    take_arrived_notices();
    const std::optional<int> failed = lowest_failed_rank(static_cast<int>(notices.heard.size()));
    if (!failed) return std::nullopt;
    if (!notices.told_failed && !notices.told_well) tell_every_rank(kWellTag, 0);
    notices.told_well = true;
    const int code = notices.codes[static_cast<size_t>(*failed)];
    if (!notices.ending_code) notices.ending_code = code;
    return code;
}

void this_job_ends_with(int exit_code) {
    if (!notices.ending_code) notices.ending_code = exit_code;
}

[[noreturn]] void end_process_after_failure(int exit_code) {
    mpi_call_mutex().lock();  // never unlocked: no other thread (a transport's progress helper) enters MPI again
    arm_finalize_deadline(exit_code);
    MPI_Finalize();
    std::fflush(stdout);
    std::fflush(stderr);
    _exit(exit_code);
}

void set_wait_limit_s(double seconds) { limit_s.store(seconds); }
double wait_limit_s() { return limit_s.load(); }

}  // namespace nb

#else  // built without MPI: one process

#include <cstdlib>

namespace nb {

void start_failure_notices() {}
void end_failure_notices() {}
int report_this_rank_failed(int exit_code, const std::string& line) {
    print_error_line(line);
    return exit_code;
}
std::optional<int> another_rank_failed() { return std::nullopt; }
void this_job_ends_with(int) {}
[[noreturn]] void end_process_after_failure(int exit_code) {
    std::fflush(stdout);
    std::fflush(stderr);
    std::_Exit(exit_code);
}
void set_wait_limit_s(double) {}
double wait_limit_s() { return 0; }

}  // namespace nb

#endif

// The MPI lifecycle of the process, and what the rest of the program asks of it (the world size and rank).
//
// MPI is initialised (MPI_Init_thread, serialized: MPI is called by one thread at a time, the main thread and
// the MPI transport's progress helper taking turns under the transport's lock) when nobubble is built with MPI
// and the process was started by an MPI launcher (mpirun/mpiexec, or srun with PMI/PMIx), or when NOBUBBLE_MPI=1
// asks for a singleton; it is finalised when the MpiSession ends. Without a launcher a process does not
// initialise MPI: a singleton MPI_Init costs about 0.3 s here, paid by every command of every test, and a
// single process needs no MPI (`train --stages P` then runs the in-process pipeline). NOBUBBLE_MPI=0 never
// initialises it.
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

namespace nb {

class MpiSession {
public:
    MpiSession(int& argc, char**& argv);
    ~MpiSession();  // MPI_Finalize, when this session initialised MPI
    MpiSession(const MpiSession&) = delete;
    MpiSession& operator=(const MpiSession&) = delete;
};

bool mpi_initialized();  // false without MPI, or when this process was not started under a launcher
bool mpi_threads_serialized();  // MPI granted MPI_THREAD_SERIALIZED (threads may call it, one at a time)
int mpi_world_size();    // 1 when MPI is not initialised
int mpi_world_rank();    // 0 when MPI is not initialised
// Every MPI call of the process holds it (MPI_THREAD_SERIALIZED): the main thread, the transports' progress
// helpers and the failure notices (src/core/job_failure.h) take turns.
std::mutex& mpi_call_mutex();

// The collectives of the set-up. Each rank must call them at the same point. They wait by polling, not blocking,
// so that another rank's failure (src/core/job_failure.h) ends the wait with ReportedElsewhere carrying that
// rank's exit code, and a rank that never arrives ends it after the watchdog's limit (RuntimeError naming
// `what`). Without MPI each returns its own value.
// The least of `value` over every rank (MPI_MIN).
long long mpi_min_over_ranks(long long value);
// Every rank's `value`, by rank.
std::vector<int> mpi_gather_to_all(int value);
// Rank 0's `value`.
int64_t mpi_broadcast_from_rank0(int64_t value);
// Returns once every rank has called it: the set-up's first meeting, where a rank that failed before it is heard of.
void mpi_wait_for_every_rank(const char* what);

}  // namespace nb

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
// The least of `value` over every rank (MPI_Allreduce, MPI_MIN): each rank must call it at the same point;
// `value` itself when MPI is not initialised.
long long mpi_min_over_ranks(long long value);

}  // namespace nb

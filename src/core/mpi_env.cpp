#include "src/core/mpi_env.h"

#ifdef NOBUBBLE_HAVE_MPI

#include <mpi.h>

#include <cstdlib>
#include <cstring>
#include <initializer_list>

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
}

MpiSession::~MpiSession() {
    if (session_initialized) MPI_Finalize();
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

long long mpi_min_over_ranks(long long value) {
    if (!session_initialized) return value;
    long long least = value;
    MPI_Allreduce(&value, &least, 1, MPI_LONG_LONG, MPI_MIN, MPI_COMM_WORLD);
    return least;
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

}  // namespace nb

#endif

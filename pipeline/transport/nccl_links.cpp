#include "pipeline/transport/nccl_links.h"

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

#include <fmt/format.h>

#include "cuda/cuda_check.h"
#include "src/core/error.h"

namespace nb {

void check_nccl(ncclResult_t result, const char* call) {
    if (result == ncclSuccess) return;
    // ncclGetLastError says more than the code (which peer, which resource); it may be empty.
    const char* detail = ncclGetLastError(nullptr);
    throw RuntimeError(fmt::format("{} failed: {}{}", call, ncclGetErrorString(result),
                                   detail && *detail ? fmt::format(" ({})", detail) : std::string()));
}

namespace {

enum class Direction { forward, backward };  // forward: lower stage -> higher stage

// The pair of this split that `stage` belongs to, by its lower stage; -1 when it is in none. Split `parity`
// pairs (parity, parity+1), (parity+2, parity+3), ...
int lower_stage_of_pair(int stage, int num_stages, int parity) {
    const int lower = (stage - parity) % 2 == 0 ? stage : stage - 1;
    if (lower < parity || lower + 1 >= num_stages) return -1;
    return lower;
}

}  // namespace

ncclComm_t init_nccl_world() {
    int rank = 0, size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    ncclUniqueId id{};
    if (rank == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    const int rc = MPI_Bcast(&id, static_cast<int>(sizeof id), MPI_BYTE, 0, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) throw RuntimeError("MPI_Bcast of the NCCL unique id failed");
    ncclComm_t world = nullptr;
    check_nccl(ncclCommInitRank(&world, size, id, rank), "ncclCommInitRank");
    return world;
}

NcclLinks::NcclLinks(int stage, int num_stages) {
    ncclComm_t world = init_nccl_world();
    split_from(world, stage, num_stages, 0);
    check_nccl(ncclCommDestroy(world), "ncclCommDestroy");
}

NcclLinks::NcclLinks(ncclComm_t world, int stage, int num_stages, int replica) {
    split_from(world, stage, num_stages, replica);
}

// A failure half way leaves what was made as it is: the driver then ends the job (src/run/mpi_driver.cpp), and
// destroying communicators could wait for ranks that are still inside an NCCL call and never come.
// A pair's colour is its lower stage's world rank (replica x stages + stage), so the pairs of different
// replicas' pipelines never meet.
void NcclLinks::split_from(ncclComm_t world, int stage, int num_stages, int replica) {
    for (Direction direction : {Direction::forward, Direction::backward}) {
        for (int parity : {0, 1}) {
            const int lower = lower_stage_of_pair(stage, num_stages, parity);
            ncclComm_t comm = nullptr;
            const int color = lower >= 0 ? replica * num_stages + lower : NCCL_SPLIT_NOCOLOR;
            check_nccl(ncclCommSplit(world, color, stage, &comm, nullptr), "ncclCommSplit");
            if (lower < 0) continue;
            NcclLink link;
            link.comm = comm;
            const bool is_lower = stage == lower;
            link.peer = is_lower ? lower + 1 : lower;
            link.peer_rank = is_lower ? 1 : 0;
            link.outgoing = (direction == Direction::forward) == is_lower;
            int my_rank = -1;
            check_nccl(ncclCommUserRank(comm, &my_rank), "ncclCommUserRank");
            if (my_rank != (is_lower ? 0 : 1))
                throw RuntimeError(fmt::format("ncclCommSplit put stage {} at rank {} of its pair with stage {}", stage,
                                               my_rank, link.peer));
            CUDA_CHECK(cudaStreamCreateWithFlags(&link.stream, cudaStreamNonBlocking));
            links_.push_back(link);
        }
    }
    connect();
}

void NcclLinks::connect() {
    void* bytes = nullptr;  // [0] sent, [1] received; their values are never looked at
    CUDA_CHECK(cudaMalloc(&bytes, 2));
    for (NcclLink& link : links_) {
        if (link.outgoing)
            check_nccl(ncclSend(bytes, 1, ncclUint8, link.peer_rank, link.comm, link.stream), "ncclSend");
        else
            check_nccl(ncclRecv(static_cast<char*>(bytes) + 1, 1, ncclUint8, link.peer_rank, link.comm, link.stream),
                       "ncclRecv");
        CUDA_CHECK(cudaStreamSynchronize(link.stream));
    }
    CUDA_CHECK(cudaFree(bytes));
}

// Errors are ignored: a destructor must not throw, and at the end of a run every transfer has completed.
NcclLinks::~NcclLinks() {
    for (NcclLink& link : links_) {
        if (link.stream) cudaStreamSynchronize(link.stream);
        if (link.comm) ncclCommDestroy(link.comm);
        if (link.stream) cudaStreamDestroy(link.stream);
        link.comm = nullptr;
        link.stream = nullptr;
    }
    links_.clear();
    cudaGetLastError();
}

void NcclLinks::abort_briefly(int wait_ms) noexcept {
    try {
        std::vector<ncclComm_t> comms;
        for (NcclLink& link : links_)
            if (link.comm) comms.push_back(link.comm);
        for (NcclLink& link : links_) link.comm = nullptr;  // whatever happens, never touched again
        auto done = std::make_shared<std::atomic<bool>>(false);
        std::thread([comms, done] {
            for (ncclComm_t comm : comms) ncclCommAbort(comm);
            done->store(true);
        }).detach();
        const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
        while (!done->load() && std::chrono::steady_clock::now() < until)
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
    } catch (...) {
        // No thread (resources exhausted): the job ends without NCCL's abort, which is only a courtesy.
    }
}

}  // namespace nb

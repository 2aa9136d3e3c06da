// NcclLinks: the NCCL communicators and CUDA streams between neighbouring pipeline stages, one per DIRECTED
// link (s -> s+1 and s+1 -> s are two links). The message protocol on top is pipeline/transport/nccl_transport.h, which
// explains why every direction needs a communicator and a stream of its own.
//
// Set-up (collective over MPI_COMM_WORLD, every rank at the same point):
//   1. rank 0 makes an ncclUniqueId and MPI_Bcast sends it to every rank;
//   2. every rank joins one world communicator with it (init_nccl_world: ncclCommInitRank, rank = MPI rank; the
//      GPU is the one CudaOps already selected from the local rank, cuda/context.cu). With D > 1 replicas the
//      world holds every replica's pipeline (MPI rank = replica x P + stage) and the replica groups are split
//      from it too (pipeline/transport/nccl_replica_sum.h);
//   3. four ncclCommSplit calls cut it into two-rank communicators, one per directed link: the pairs
//      (0,1) (2,3) ... then (1,2) (3,4) ..., each once for the forward and once for the backward direction
//      (a rank is in at most one pair of each split: at most four links, two per neighbour); key = world
//      rank, so the lower stage is rank 0 of its pair;
//      with D > 1 the colour is the lower stage's world rank, so that each replica's pipeline has its own pairs;
//   4. the world communicator is destroyed: only the links carry traffic;
//   5. one byte crosses every link, link after link in the order of the splits, each waited for: NCCL connects
//      two ranks at their first transfer, and that connection can wait on the host for the peer's side. A
//      rank waiting there in the run would serve neither its other links nor its MPI traffic (the
//      announcements its neighbours wait for); connected here, in one order every rank follows, no link waits
//      for a rank that waits on another link, and in the run an NCCL call queues work for the GPU.
// Every rank makes the same NCCL calls in the same order, which NCCL requires of collective calls.
//
// Compiled only where nobubble is built with MPI and CUDA (CMakeLists.txt: pipeline/nccl_*.cpp).
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <vector>

namespace nb {

// Throws RuntimeError "<call> failed: <ncclGetErrorString> (<ncclGetLastError>)" unless `result` is success.
void check_nccl(ncclResult_t result, const char* call);

// One direction between this stage and a neighbour.
struct NcclLink {
    int peer = -1;              // the neighbour's stage in this pipeline
    bool outgoing = false;      // this stage sends on it (else receives)
    ncclComm_t comm = nullptr;  // two ranks: the lower stage is rank 0
    int peer_rank = 0;          // the neighbour's rank in `comm`
    cudaStream_t stream = nullptr;  // non-blocking; every NCCL call of this link, and nothing else, runs on it
};

// Steps 1 and 2: the communicator of every MPI rank (collective over MPI_COMM_WORLD; the caller destroys it).
ncclComm_t init_nccl_world();

class NcclLinks {
public:
    // Collective (see above). `stage` and `num_stages` are this MPI rank and the world size; the CUDA device
    // must be current. RuntimeError naming the failed NCCL/CUDA/MPI call, after which the job must be ended
    // (MPI_Abort): other ranks may be waiting inside NCCL for this one.
    NcclLinks(int stage, int num_stages);
    // Steps 3 and 5 from `world` (init_nccl_world), which stays the caller's: `stage` of `num_stages` in
    // pipeline `replica` (MPI rank replica x num_stages + stage).
    NcclLinks(ncclComm_t world, int stage, int num_stages, int replica);
    ~NcclLinks();  // waits for each link's stream, then destroys its communicator (in one order on every rank)
    NcclLinks(const NcclLinks&) = delete;
    NcclLinks& operator=(const NcclLinks&) = delete;

    // This stage's links (two per neighbour, one each way), in the order of the splits.
    std::vector<NcclLink>& all() { return links_; }

    // The fault path: asks NCCL to stop whatever of ours still runs on the device (ncclCommAbort), but waits
    // for it at most `wait_ms`: NCCL's abort may itself wait for a peer that is already gone, and the caller
    // must go on to end the job (MPI_Abort) whatever NCCL does.
    void abort_briefly(int wait_ms) noexcept;

private:
    void split_from(ncclComm_t world, int stage, int num_stages, int replica);  // step 3 then step 5
    void connect();  // step 5 above

    std::vector<NcclLink> links_;  // in the order of the splits that made them: the same order on every rank
};

}  // namespace nb

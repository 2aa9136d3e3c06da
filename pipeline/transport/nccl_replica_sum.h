// The CUDA backend's data-parallel communicators and its replica gradient sum (pipeline/transport/replica_sum.h:
// the order of the adds, the buckets and shards).
//
// SET-UP (make_nccl_job_comms; collective over MPI_COMM_WORLD, every rank at the same point, after every GPU
// started): one NCCL world over the P x D ranks (MPI rank = replica x P + stage), from which are split
//   - this replica's pipeline links (pipeline/transport/nccl_links.h), and
//   - per chunk of the rank (V with interleaved schedules, else 1), the communicator of this stage's D replicas
//     (colour = the rank's stage, key = its replica: rank k of the group is replica k), each with a stream of
//     its own, every pair of replicas connected before the run by one float each way (NCCL connects at the
//     first transfer and may wait on the host for the peer there; here every rank waits in one order);
// then the world is destroyed. One communicator per chunk, so that the chunks' sums never have to be issued
// in one order on the replicas (NCCL matches the calls of a communicator in issue order).
//
// THE SUM (make_nccl_replica_sum), per bucket, queued on the group's stream once its slots are done (buffers
// taken at begin(), in compute-stream order):
//   the stream waits for the compute stream (where the gradient was written); the slots are copied into one
//   packed buffer; one NCCL group of ncclSend (shard r to replica r) and ncclRecv (shard `me` from every replica); the sum of the D
//   shards `me` in replica order (cuda/replica_order_sum.h); one NCCL group sending the summed shard to every
//   replica and receiving theirs into the packed buffer; the packed buffer copied back into the slots.
//   Not ncclReduceScatter / ncclAllGather: NCCL's reduction order is its own (ring or tree, by topology), and
//   the sum must be the oracle's bits; the all-gather by send/recv because the shards may differ by one.
//   try_finish() polls an event recorded after the last copy: the compute stream never waits for the replica
//   stream (as with the links, nccl_transport.h), and the host issues the optimizer's work once it has seen the
//   sum complete. Zero-length shards send nothing, on both sides alike.
//   As with the links, progress needs the GPU to run the NCCL kernels of the group beside the compute kernels.
//
// Compiled only where nobubble is built with MPI and CUDA, and NOT RUN on a GPU yet: the machines it was
// written on have none.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <memory>
#include <vector>

#include "src/ops/ops.h"
#include "pipeline/transport/nccl_links.h"
#include "pipeline/transport/replica_sum.h"

namespace nb {

// The communicator of one stage's (one chunk's) D replicas.
struct NcclReplicaGroup {
    ncclComm_t comm = nullptr;
    cudaStream_t stream = nullptr;  // non-blocking; every call of the group runs on it
    int replica = 0, replicas = 1;  // this rank's rank in `comm`, and its size D

    NcclReplicaGroup() = default;
    NcclReplicaGroup(const NcclReplicaGroup&) = delete;
    NcclReplicaGroup& operator=(const NcclReplicaGroup&) = delete;
    ~NcclReplicaGroup();  // waits for the stream, then destroys the communicator
};

struct NcclJobComms {
    std::unique_ptr<NcclLinks> links;                     // this replica's pipeline
    std::vector<std::unique_ptr<NcclReplicaGroup>> groups;  // by chunk
};

// Collective (see SET-UP). This rank is `stage` of `num_stages` in pipeline `replica` of `replicas`, with
// `chunks` chunks; the CUDA backend `ops` has started. RuntimeError naming the failed call (the job must end).
NcclJobComms make_nccl_job_comms(Ops& ops, int stage, int num_stages, int replica, int replicas, int chunks);

// The sum of a stage's gradient over `group` (which, and `ops`, must outlive it).
std::unique_ptr<ReplicaSum> make_nccl_replica_sum(NcclReplicaGroup& group, Ops& ops);

}  // namespace nb

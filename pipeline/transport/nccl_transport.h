// NcclTransport: the CUDA backend's transport between pipeline stages, one stage per MPI rank and one GPU per
// rank (docs/DESIGN.md section 1, "Transport": NCCL send/recv, the NCCL unique id broadcast by MPI). The GPU is
// chosen from the local rank by CudaOps (cuda/context.cu); more ranks on a node than GPUs is its error.
//
// WHAT GOES WHERE
//   - Device tensors of the hot path, Channel::activation, gradient and eval_activation, between NEIGHBOURS
//     (s and s±1): ncclSend / ncclRecv, GPU to GPU, on links of their own (pipeline/transport/nccl_links.h).
//   - Everything else goes through an inner MpiTransport (pipeline/transport/mpi_transport.h), which this one owns:
//     host doubles (reports, final values, traces), the all-gathers of the global clip, wait_for_progress,
//     finish and abort. Tensors on other channels (final_weights, final_optimizer: end of run only) or between
//     stages that are not neighbours travel there as host copies: tensor.to(Device::cpu) on send, and the
//     receiver's try_take copies the host tensor back to the GPU, so that it hands out device tensors only.
//   Both ends decide the route from (peer, channel) alone, so they always agree.
//
// ORDER: ANNOUNCEMENTS. NCCL point-to-point has no tags: the sends and receives between two ranks on one
// communicator are matched in the order they are issued, and a mismatched pair silently delivers one message
// into another's buffer (or hangs, when their sizes differ). The runner posts its receives ahead of need in
// its own task order, which nothing ties to the order in which the neighbour sends, so the receiver cannot
// issue its ncclRecv calls as receives are posted. Instead the sender numbers its device
// messages per link (0, 1, 2, ...) and, for each, first sends an announcement {channel, index, bytes, dtype}
// to the receiver through the inner transport, on Channel::announce with index = that number, then issues the
// ncclSend. The receiver takes the announcements of a link strictly by number (at each call of the transport,
// every link, so that a transfer starts as soon as it is announced) and issues one ncclRecv per announcement
// in that order, which is the sender's ncclSend order. The ncclRecv lands in the posted
// receive's buffer, or, when the announcement comes before the runner posts the receive, in a fresh device
// buffer of the announced size that post_recv then claims. The announced size and dtype are checked against
// the posted shape and dtype (std::logic_error, as transport.h says). The announcements go through the inner
// transport rather than MPI calls of our own because MPI is initialised MPI_THREAD_SERIALIZED and the inner
// transport's progress thread calls MPI under a lock only it holds (pipeline/transport/mpi_transport.cpp).
//   A receiver listens for the next announcement of a link (an MPI receive posted in the inner transport) only
// while some posted receive from that peer still waits for its announcement: such a receive's message will
// come, and every message before it on the link is announced first, so every announcement receive posted
// completes and none is left pending when the run ends.
//
// DEADLOCK: ONE COMMUNICATOR AND ONE STREAM PER DIRECTION. Activations flow s -> s+1 while gradients flow
// s+1 -> s. Were both directions on one communicator and stream, stage s could have [send act 5, recv grad 3]
// queued while stage s+1 has [send grad 3, recv act 5]: each send waits for a receive queued behind the other
// send, forever. So each directed link has its own two-rank communicator and its own stream, and on it the
// sends (and the receives) are issued in announcement order. The compute stream never waits for a link (a
// received tensor is handed out only once it has landed, below), so the head of a link's stream waits at most
// for compute issued before it, which completes on its own: by induction the k-th ncclSend and the k-th
// ncclRecv of a link both reach the heads of their streams, meet and complete. One caveat, which NCCL
// documents for several communicators in use at once on one GPU: this relies on the GPU running the kernels
// of the links concurrently (a middle stage has four), which NCCL does not promise; the two-GPU test
// (tests/cuda/test_nccl_transport.sh) is where it is exercised.
//
// STREAM ORDER WITH THE COMPUTE STREAM (CudaContext::stream, where every kernel and allocator copy runs)
//   send: an event recorded on the compute stream after the tensor was produced; the link's stream waits for
//         it, then ncclSend, then a `sent` event on the link's stream. The transport keeps a reference to the
//         tensor until `sent` has completed (cudaEventQuery), so the caching allocator cannot hand its block
//         out again while NCCL still reads it.
//   recv: the buffer comes from the caching allocator, which reuses blocks in compute-stream order: a block
//         may have been released while compute work that uses it is still queued. So an event is recorded on
//         the compute stream right after the buffer is allocated, and the link's stream waits for it before
//         the ncclRecv. The buffer is allocated when the receive is posted (the runner posts a few tasks
//         ahead, and the buffer is held from then until taken), so by the time the data comes that event has
//         long completed and the transfer overlaps compute; recorded at the ncclRecv instead, it would make
//         the transfer wait for whatever compute the host had queued by then.
//         After the ncclRecv a `landed` event is recorded on the link's stream, and try_take hands out the
//         tensor once `landed` has COMPLETED (cudaEventQuery == cudaSuccess). The alternative, handing it out
//         as soon as the ncclRecv is issued with the compute stream made to wait for `landed`, would let the
//         host queue the next forward earlier, but the stage's clock would count the wait for a neighbour as
//         busy compute (the wait happens inside later GPU work), breaking the bubble and trace measurements;
//         and a tensor handed out would not hold its data yet, which the interface's "arrived" promises. The
//         cost is one poll of the host per message, small next to a forward.
//   The executor overlaps transfers with compute: while a stage computes microbatch k, the transfers of
//   k-1's output and k+1's input run on the link streams.
//
// WHOLE-DEVICE WAITS. An ncclSend on the GPU completes only once the neighbour's host has taken its
// announcement and issued the ncclRecv. A host blocked in a call that waits for the WHOLE device (cudaFree,
// cudaDeviceSynchronize) waits for its own pending ncclSends too, so two neighbours doing so at once, each
// with a send the other has not yet received, would wait for each other forever. Stream-level waits (every op,
// copy and sum of the backend) are safe: the compute stream never waits for a link. So the backend makes no
// cudaFree during a run (the scratch buffer grows through the caching allocator, cuda/context.cu), with one
// exception left: the allocator's retry after an out-of-memory frees its cached blocks (cuda/memory.cu).
//
// PROGRESS. wait_for_progress must not block in MPI while a transfer the runner may wait for is on the GPU,
// since nothing would wake it: then it polls (the link events, and announcements through the inner
// transport) and returns after a short sleep, so the runner's loop tries again. Otherwise (nothing of ours on
// the GPU that the runner may wait for) it blocks in the inner transport, which an announcement wakes.
//
// ERRORS. Every NCCL and CUDA call is checked: RuntimeError naming the call (ncclGetErrorString, and NCCL's
// last error message). abort() asks NCCL to stop our device work (ncclCommAbort, waited for at most a second:
// NCCL's abort can wait for a peer that is gone) and then ends the process through the inner transport (the
// other ranks end on the failure's notice, src/core/job_failure.h). While it waits on the GPU,
// wait_for_progress also checks the links for asynchronous NCCL errors.
//
// Compiled only where nobubble is built with MPI and CUDA (CMakeLists.txt: pipeline/nccl_*.cpp).
#pragma once

#include <memory>

#include "src/ops/ops.h"
#include "pipeline/transport/transport.h"

namespace nb {

// The NCCL transport over `inner` (the MPI transport of this rank, make_mpi_transport(), not used yet), for
// the CUDA backend `ops` (its device and compute stream; it must outlive the transport). Collective over
// MPI_COMM_WORLD: every rank calls it at the same point, after every rank has started its GPU (a rank that
// failed to would leave the others waiting inside NCCL). RuntimeError naming the failed call.
std::unique_ptr<Transport> make_nccl_transport(std::unique_ptr<Transport> inner, Ops& ops);
// The same over links already made (data parallelism: every replica's pipeline split from one NCCL world with
// the replica groups, pipeline/transport/nccl_replica_sum.h); `inner` is the rank's pipeline transport.
class NcclLinks;
std::unique_ptr<Transport> make_nccl_transport(std::unique_ptr<Transport> inner, Ops& ops,
                                               std::unique_ptr<NcclLinks> links);

}  // namespace nb

// Transport: how the stages of one pipeline talk to each other (docs/DESIGN.md section 1, "Transport").
//
// One Transport object is one stage's endpoint (an MPI rank; in one process, one of P endpoints of an
// InProcessNetwork). Everything the runtime sends is named by a MessageTag = (channel, index), so that no two
// messages between the same two stages can be confused: the forward activation of microbatch 7 and its
// backward gradient travel on different channels, and each channel numbers its messages (microbatch, iteration,
// parameter...). Each (from, to, tag) is sent exactly once.
//
// Everything is non-blocking, because the executor is an event loop (pipeline/stage/stage_runner.h) and because P
// stages may share one thread (in-process): a receive is posted ahead of need with the shape it will have, and
// polled with try_take until it has arrived; a send returns at once. The only call that blocks is
// wait_for_progress, for at most the time it is given, which the one-stage-per-process driver calls when its
// stage cannot move (and between the calls checks its watchdog, src/run/watchdog.h).
//
// Payloads are tensors (activations and their gradients, in the backend's activation dtype; final weights) and
// short vectors of host doubles (the per-iteration reports to stage 0: losses and sums of squares, whose bits
// must survive, hence doubles). The MPI transport moves host tensors (CPU backend), the in-process one copies
// tensors on whatever device they are; the interface names no device, so the device-side transport
// (pipeline/transport/nccl_transport.h: NCCL send/recv on CUDA tensors, host doubles over MPI) implements it as it is.
//
// Collectives: the global gradient-norm clip needs every stage's per-parameter sums of squares on every stage
// (optim/grad_clip.h): a non-blocking all-gather. Every stage starts the same all-gathers in the same order (an
// MPI rule); the runner does, since they come from optimizer steps every stage makes in step order.
#pragma once

#include <chrono>
#include <compare>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "src/core/tensor.h"

namespace nb {

enum class Channel : uint8_t {
    activation,       // stage s -> s+1, the forward output of microbatch `index`
    gradient,         // stage s -> s-1, the input gradient of microbatch `index`
    eval_activation,  // stage s -> s+1, evaluation forward number `index` (counted over the run)
    report,           // any stage -> stage 0, the stage's report on iteration `index`
    final_weights,    // any stage -> stage 0, master weight tensor number `index` of the stage's layout
    final_values,     // any stage -> stage 0, what the stage tells at the end (index 0)
    clip_sums,        // all-gather of the per-parameter sums of squares of optimizer step `index`
    final_optimizer,  // any stage -> stage 0, optimizer state tensor number `index` (pipeline/stage/state_hash.h order)
    trace,            // any stage -> stage 0, the stage's timed records for --trace (index 0)
    announce,         // stage s -> s±1, inside the NCCL transport: the header of its device message number
                      // `index` on that link (pipeline/transport/nccl_transport.h); never sent by the runtime itself
    stop_vote,        // all-gather at the end of iteration `index`: was a stop asked (pipeline/stage/stop_vote.h)
    checkpoint,       // any stage -> stage 0, its checkpoint file of step `index` is written (size, sha256)
    // Between the D replicas of one stage (data parallelism: a transport whose stages are the replicas):
    replica_grads,    // replica r -> k, shard k of a gradient bucket (pipeline/stage/replica_grad_sum.h)
    replica_sums,     // replica k -> every replica, shard k of the bucket, summed in replica order
    replica_report,   // replica r > 0 -> replica 0, its report on iteration `index` (loss sums, MoE loads)
    replica_weights,  // the distributed optimizer: an owner -> every replica, a tensor it updated
    replica_state,    // the distributed optimizer: an owner -> replica 0, a state tensor for a checkpoint or the end
    tied_grads,       // tied embeddings: first <-> last stage, its half of the matrix's gradient of step `index`
    tied_norm,        // tied embeddings, --clip-scope stage: first -> last stage, its norm of step `index`
    tied_check,       // tied embeddings, debug builds: first <-> last stage, the sha256 of its matrix at step `index`
};
constexpr int kNumChannels = 20;
const char* channel_name(Channel channel);

struct MessageTag {
    Channel channel;
    int64_t index;
    auto operator<=>(const MessageTag&) const = default;
};
std::string describe(const MessageTag& tag);  // "gradient 7"

class Transport {
public:
    virtual ~Transport() = default;

    virtual int stage() const = 0;       // this endpoint's stage
    virtual int num_stages() const = 0;  // P

    // ---- tensors ----
    // Sends `tensor` to stage `to` and returns at once; the transport keeps a reference until the message is
    // delivered, so the sender must not write to the tensor afterwards (the runner never does: every tensor it
    // sends is fresh). Sending to oneself is allowed.
    virtual void send(int to, MessageTag tag, const Tensor& tensor) = 0;
    // Posts the receive of `tag` from stage `from`: a tensor of `shape` and `dtype` (std::logic_error if the
    // message that arrives has another size, or if the same receive is posted twice).
    virtual void post_recv(int from, MessageTag tag, const Shape& shape, DType dtype) = 0;
    // The posted receive's tensor once it has arrived (the receive is then complete and forgotten); nullopt
    // while it has not. std::logic_error if it was never posted.
    virtual std::optional<Tensor> try_take(int from, MessageTag tag) = 0;

    // ---- host doubles ----
    virtual void send_values(int to, MessageTag tag, std::vector<double> values) = 0;
    // At most `max_count` doubles (std::logic_error if more arrive).
    virtual void post_recv_values(int from, MessageTag tag, size_t max_count) = 0;
    virtual std::optional<std::vector<double>> try_take_values(int from, MessageTag tag) = 0;

    // ---- collectives ----
    // Non-blocking all-gather: this stage contributes `values` (counts[s] doubles come from stage s, so
    // values.size() == counts[stage()]); the result is every stage's contribution, index = stage.
    virtual void start_allgather(MessageTag tag, std::vector<double> values, const std::vector<int64_t>& counts) = 0;
    virtual std::optional<std::vector<std::vector<double>>> try_take_allgather(MessageTag tag) = 0;

    // Blocks until something posted here may have completed, or for at most `limit`: true when the caller
    // should look again (something completed, or the transport cannot tell), false when `limit` passed and
    // nothing did. A transport that waits by polling sleeps between its polls, so that an idle rank leaves its
    // core to the others. With the stages of one process in one thread nothing can arrive while it waits, so
    // there it returns true at once (the in-process driver never calls it).
    virtual bool wait_for_progress(std::chrono::milliseconds limit) = 0;
    // Blocks until every send of this endpoint has been delivered (before the process ends its transport).
    virtual void finish() = 0;
    // Ends this process after a failure that has been reported (src/core/job_failure.h: the other ranks hear of
    // it at their next wait and end too), with `exit_code`: the fault path, so that no stage is left waiting for
    // a message from a failed one.
    [[noreturn]] virtual void abort(int exit_code) = 0;
};

}  // namespace nb

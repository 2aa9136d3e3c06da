// ReplicaSum: the sum of one stage's gradient over its D data-parallel replicas (docs/DESIGN.md section 2, "Data
// parallelism"), in replica order from zero, the same bits on every replica and in the oracle:
//
//   sum[i] = ((0 + g_0[i]) + g_1[i]) + ... + g_{D-1}[i]      (f32 adds, replica 0 first)
//
// The gradient's slots are packed into buckets of whole slots (bucket_slots below), each bucket cut into D shards
// of consecutive elements, shard k = [k n / D, (k+1) n / D) of its n elements, and summed in two rounds:
//   reduce-scatter  replica r sends shard k to replica k, which adds the D shards k in replica order;
//   all-gather      replica k sends its summed shard to every replica.
// Each replica sends and receives 2 (D-1)/D of the gradient, as a ring all-reduce does, but the order of every
// addition is fixed by replica index, not by the network or the library.
//
// Two implementations, one per way of moving tensors:
//   - pipeline/stage/replica_grad_sum.h: tagged messages over a Transport among the replicas (MPI; host
//     tensors, device tensors staged through the host);
//   - pipeline/transport/nccl_replica_sum.h: NCCL send/recv among the replicas' GPUs and the adds on the GPU
//     (built with MPI and CUDA only).
//
// Non-blocking, and started as the step's last backward (or W) goes: begin() before it, then slots_done_from(k)
// after each of its layers (slots [k, n) are final: the layers run in reverse, so the buckets at the end of the
// layout are whole first), each bucket starting as soon as all its slots are; then try_finish() until it returns
// true, while the stage goes on with whatever its list allows. start() is begin() with every slot final. Every
// replica starts its buckets in one order, from the last (NCCL matches a communicator's calls in issue order).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "src/core/tensor.h"

namespace nb {

class ReplicaSum {
public:
    // About this many bytes per bucket (a larger slot is a bucket of its own).
    static constexpr size_t kBucketBytes = size_t{4} << 20;

    virtual ~ReplicaSum() = default;
    // The sum of `slots` (f32 tensors in one order on every replica) for optimizer step `step` is under way; none
    // of them is final yet. std::logic_error while another sum is in flight.
    virtual void begin(int64_t step, std::vector<Tensor>& slots) = 0;
    // Slots [first, n) hold their final gradient (and are left untouched until try_finish has written the sum into
    // them): every bucket inside them that has not started starts. Calls name ever smaller `first`.
    virtual void slots_done_from(int first) = 0;
    void start(int64_t step, std::vector<Tensor>& slots) {
        begin(step, slots);
        slots_done_from(0);
    }
    // Moves the sum on; true once `slots` hold it (then the sum is over and another may start). std::logic_error
    // before every slot was said to be final.
    virtual bool try_finish() = 0;
    virtual bool in_flight() const = 0;
    // What it waits for, for the watchdog: "the replica sum of step 3: bucket 0's shards from replica 1".
    virtual std::string waits_for() const = 0;
};

// Slots [first, end) of one bucket.
struct SlotBucket {
    int first = 0, end = 0;
};
// `slots` in layout order, cut into buckets of whole slots of at most `max_bytes` each (a larger slot alone).
std::vector<SlotBucket> bucket_slots(const std::vector<Tensor>& slots, size_t max_bytes);
// Element `replica`'s shard of a bucket of `numel` elements begins at: numel x replica / replicas.
inline int64_t shard_begin(int64_t numel, int replica, int replicas) { return numel * replica / replicas; }

}  // namespace nb

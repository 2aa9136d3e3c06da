// ReplicaGradSum: one stage's gradient summed over its D data-parallel replicas, in replica order, with the same
// bits on every replica and in the oracle (docs/DESIGN.md section 2, "Data parallelism"; optim/replica_grads.h).
//
// The gradient's slots are packed into buckets of about kBucketBytes (whole slots, in layout order). Each bucket
// is cut into D shards of consecutive elements, shard k = [k n / D, (k+1) n / D), and reduced in two rounds of
// point-to-point messages over the replica transport (a Transport whose stages are the D replicas of this stage):
//
//   reduce-scatter  replica r sends its shard k to replica k and receives shard r from every replica; then
//                   sum[i] = ((0 + g_0[i]) + g_1[i]) + ... + g_{D-1}[i]   (float adds, replica order)
//   all-gather      replica r sends its summed shard to every replica and receives theirs
//
// Each replica sends and receives 2 (D-1)/D of the bucket, as a ring all-reduce does, and the order of every
// addition is fixed by replica index, not by the network: the sum is the oracle's, bit for bit. It is also the
// split the distributed optimizer needs (replica k owns shard k after the first round). Messages rather than
// MPI collectives, so that the V chunks of a rank can reduce in whatever order their steps come without
// breaking MPI's rule that every rank starts the same collectives in the same order; every message has its own
// tag: (channel, ((step x stages + stage) x stride + bucket)), stride the most slots any stage has (a bucket holds
// one slot at least): dense, so that an MPI with few tags wraps around as late as it can.
//
// Non-blocking: start() when the step's gradient is complete (its last backward or W), then try_finish() until it
// returns true; meanwhile the stage goes on with whatever its list allows.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/params.h"
#include "pipeline/transport/transport.h"

namespace nb {

class ReplicaGradSum {
public:
    static constexpr size_t kBucketBytes = size_t{4} << 20;

    // `replicas`: this stage's replica transport (stage() = its replica, num_stages() = D); `stage` of
    // `num_stages` pipeline stages (virtual stages with chunks): the tags' stage field; `tag_stride`: at least the
    // most gradient slots of any stage, the same on every rank.
    ReplicaGradSum(Transport& replicas, int stage, int num_stages, int64_t tag_stride);

    // Starts summing `grads` (host f32 tensors, left untouched until try_finish writes the sum into them) for
    // optimizer step `step`. std::logic_error while another sum is in flight.
    void start(int64_t step, TensorSet& grads);
    // Moves the sum on; true once `grads` holds it (then the sum is over and another may start).
    bool try_finish();
    bool in_flight() const { return grads_ != nullptr; }
    // What it waits for, for the watchdog: "the replica sum of step 3: bucket 0's shards from replica 1".
    std::string waits_for() const;

private:
    struct Bucket {
        int first_slot = 0, end_slot = 0;
        std::vector<float> packed;  // the bucket's slots, one after the other; the sum when done
        std::vector<std::optional<Tensor>> shards_in, sums_in;  // by replica: what has come of each round
        bool reduced = false;       // round 1 is done: this replica's shard summed and sent
    };
    int64_t shard_begin(const Bucket& b, int replica) const;
    MessageTag tag(Channel channel, size_t bucket) const;
    void pack(Bucket& b) const;
    void unpack(const Bucket& b);
    void send_shards(size_t bucket);
    void post_shard_receives(size_t bucket);
    bool take_arrived(size_t bucket, Channel channel, std::vector<std::optional<Tensor>>& into);
    bool try_reduce(size_t bucket);
    bool try_gather(size_t bucket);

    Transport& replicas_;
    const int replica_, num_replicas_, stage_, num_stages_;
    const int64_t tag_stride_;
    TensorSet* grads_ = nullptr;
    int64_t step_ = 0;
    std::vector<Bucket> buckets_;
    size_t gathered_ = 0;  // buckets whose sum is complete, in bucket order
};

}  // namespace nb

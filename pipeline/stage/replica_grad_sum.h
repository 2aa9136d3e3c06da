// ReplicaGradSum: the replica sum of pipeline/transport/replica_sum.h (read that first) as tagged
// point-to-point messages over the replica transport (a Transport whose stages are the D replicas of this stage):
// the MPI path. Host tensors are packed as they are; device tensors (CUDA without the NCCL replica sum) are staged
// through the host.
//
// Messages rather than MPI collectives, so that the V chunks of a rank can reduce in whatever order their steps
// come without breaking MPI's rule that every rank starts the same collectives in the same order; every message
// has its own tag: (channel, ((step x stages + stage) x stride + bucket)), stride the most slots any stage has (a
// bucket holds one slot at least): dense, so that an MPI with few tags wraps around as late as it can.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "pipeline/transport/replica_sum.h"
#include "pipeline/transport/transport.h"

namespace nb {

class ReplicaGradSum final : public ReplicaSum {
public:
    // `replicas`: this stage's replica transport (stage() = its replica, num_stages() = D); `stage` of
    // `num_stages` pipeline stages (virtual stages with chunks): the tags' stage field; `tag_stride`: at least the
    // most gradient slots of any stage, the same on every rank.
    ReplicaGradSum(Transport& replicas, int stage, int num_stages, int64_t tag_stride);

    void begin(int64_t step, std::vector<Tensor>& slots) override;
    void slots_done_from(int first) override;
    bool try_finish() override;
    bool in_flight() const override { return slots_ != nullptr; }
    std::string waits_for() const override;

private:
    struct Bucket {
        int first_slot = 0, end_slot = 0;
        std::vector<float> packed;  // the bucket's slots, one after the other; the sum when done
        std::vector<std::optional<Tensor>> shards_in, sums_in;  // by replica: what has come of each round
        bool reduced = false;       // round 1 is done: this replica's shard summed and sent
        bool gathered = false;      // round 2 too: the sum is in the slots
    };
    int64_t shard_begin(const Bucket& b, int replica) const;
    MessageTag tag(Channel channel, size_t bucket) const;
    Tensor& slot(int i) const;
    void pack(Bucket& b) const;
    void unpack(const Bucket& b);
    void send_shards(size_t bucket);
    void post_shard_receives(size_t bucket);
    bool take_arrived(size_t bucket, Channel channel, std::vector<std::optional<Tensor>>& into);
    bool try_reduce(size_t bucket);
    bool try_gather(size_t bucket);
    void start_bucket(size_t bucket);

    Transport& replicas_;
    const int replica_, num_replicas_, stage_, num_stages_;
    const int64_t tag_stride_;
    std::vector<Tensor>* slots_ = nullptr;
    int64_t step_ = 0;
    std::vector<Bucket> buckets_;
    size_t unstarted_ = 0;  // buckets [0, unstarted_) wait for their slots (they start from the last)
    size_t gathered_ = 0;   // how many buckets' sums are in the slots
};

}  // namespace nb

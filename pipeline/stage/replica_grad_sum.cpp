#include "pipeline/stage/replica_grad_sum.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace nb {

ReplicaGradSum::ReplicaGradSum(Transport& replicas, int stage, int num_stages, int64_t tag_stride)
    : replicas_(replicas),
      replica_(replicas.stage()),
      num_replicas_(replicas.num_stages()),
      stage_(stage),
      num_stages_(num_stages),
      tag_stride_(tag_stride) {}

int64_t ReplicaGradSum::shard_begin(const Bucket& b, int replica) const {
    return nb::shard_begin(static_cast<int64_t>(b.packed.size()), replica, num_replicas_);
}

MessageTag ReplicaGradSum::tag(Channel channel, size_t bucket) const {
    return {channel, (step_ * num_stages_ + stage_) * tag_stride_ + static_cast<int64_t>(bucket)};
}

Tensor& ReplicaGradSum::slot(int i) const { return (*slots_)[static_cast<size_t>(i)]; }

void ReplicaGradSum::pack(Bucket& b) const {
    size_t n = 0;
    for (int i = b.first_slot; i < b.end_slot; ++i) n += static_cast<size_t>(slot(i).numel());
    b.packed.resize(n);
    float* at = b.packed.data();
    for (int i = b.first_slot; i < b.end_slot; ++i) {
        const Tensor host = slot(i).to(Device::cpu);  // the slot itself on the CPU
        std::memcpy(at, host.f32(), host.bytes());
        at += host.numel();
    }
}

void ReplicaGradSum::unpack(const Bucket& b) {
    const float* at = b.packed.data();
    for (int i = b.first_slot; i < b.end_slot; ++i) {
        Tensor& t = slot(i);
        Tensor host = t.device() == Device::cpu ? t : Tensor::empty(t.shape());
        std::memcpy(host.f32(), at, host.bytes());
        if (t.device() != Device::cpu) t.copy_from(host);
        at += t.numel();
    }
}

// Shard k of the bucket, a fresh tensor (the transport holds on to what it sends).
static Tensor slice(const std::vector<float>& packed, int64_t begin, int64_t end) {
    Tensor t = Tensor::empty({end - begin});
    std::copy(packed.begin() + begin, packed.begin() + end, t.f32());
    return t;
}

void ReplicaGradSum::post_shard_receives(size_t bucket) {
    const Bucket& b = buckets_[bucket];
    const int64_t mine = shard_begin(b, replica_ + 1) - shard_begin(b, replica_);
    for (int r = 0; r < num_replicas_; ++r) {
        if (r == replica_) continue;
        replicas_.post_recv(r, tag(Channel::replica_grads, bucket), {mine}, DType::f32);
        const int64_t theirs = shard_begin(b, r + 1) - shard_begin(b, r);
        replicas_.post_recv(r, tag(Channel::replica_sums, bucket), {theirs}, DType::f32);
    }
}

void ReplicaGradSum::send_shards(size_t bucket) {
    const Bucket& b = buckets_[bucket];
    for (int r = 0; r < num_replicas_; ++r)
        if (r != replica_)
            replicas_.send(r, tag(Channel::replica_grads, bucket), slice(b.packed, shard_begin(b, r), shard_begin(b, r + 1)));
}

void ReplicaGradSum::begin(int64_t step, std::vector<Tensor>& slots) {
    if (in_flight())
        throw std::logic_error(fmt::format("replica sum of step {} started while step {}'s is in flight", step, step_));
    slots_ = &slots;
    step_ = step;
    gathered_ = 0;
    buckets_.clear();
    for (const SlotBucket& s : bucket_slots(slots, kBucketBytes)) {
        Bucket b;
        b.first_slot = s.first;
        b.end_slot = s.end;
        buckets_.push_back(std::move(b));
    }
    if (static_cast<int64_t>(buckets_.size()) > tag_stride_)
        throw std::logic_error(fmt::format("replica sum: {} buckets exceed the tag stride {}", buckets_.size(), tag_stride_));
    unstarted_ = buckets_.size();
}

void ReplicaGradSum::slots_done_from(int first) {
    if (!in_flight()) throw std::logic_error("replica sum: slots done with no sum begun");
    while (unstarted_ > 0 && buckets_[unstarted_ - 1].first_slot >= first) start_bucket(--unstarted_);
}

// The bucket's slots are final: packed (a copy: the stage may go on), and its round 1 on its way.
void ReplicaGradSum::start_bucket(size_t bucket) {
    pack(buckets_[bucket]);
    post_shard_receives(bucket);
    send_shards(bucket);
}

// Takes every receive of `channel` of the bucket that has arrived; true once all D - 1 are in.
bool ReplicaGradSum::take_arrived(size_t bucket, Channel channel, std::vector<std::optional<Tensor>>& into) {
    into.resize(static_cast<size_t>(num_replicas_));
    bool all = true;
    for (int r = 0; r < num_replicas_; ++r) {
        auto& slot = into[static_cast<size_t>(r)];
        if (r == replica_ || slot) continue;
        slot = replicas_.try_take(r, tag(channel, bucket));
        all &= slot.has_value();
    }
    return all;
}

// Round 1: every replica's shard `replica_` of the bucket has come. Their sum in replica order, from 0, into
// this replica's shard of `packed`, and sent to every other replica.
bool ReplicaGradSum::try_reduce(size_t bucket) {
    Bucket& b = buckets_[bucket];
    if (b.reduced) return true;
    if (!take_arrived(bucket, Channel::replica_grads, b.shards_in)) return false;
    const int64_t begin = shard_begin(b, replica_), end = shard_begin(b, replica_ + 1);
    std::vector<float> sum(static_cast<size_t>(end - begin), 0.0f);
    for (int r = 0; r < num_replicas_; ++r) {
        const float* g = r == replica_ ? b.packed.data() + begin : b.shards_in[static_cast<size_t>(r)]->f32();
        for (size_t i = 0; i < sum.size(); ++i) sum[i] += g[i];
    }
    std::copy(sum.begin(), sum.end(), b.packed.begin() + begin);
    b.shards_in.clear();
    for (int r = 0; r < num_replicas_; ++r)
        if (r != replica_) replicas_.send(r, tag(Channel::replica_sums, bucket), slice(b.packed, begin, end));
    b.reduced = true;
    return true;
}

// Round 2: every other replica's summed shard has come; the bucket's sum is whole.
bool ReplicaGradSum::try_gather(size_t bucket) {
    Bucket& b = buckets_[bucket];
    if (!take_arrived(bucket, Channel::replica_sums, b.sums_in)) return false;
    for (int r = 0; r < num_replicas_; ++r) {
        if (r == replica_) continue;
        const Tensor& t = *b.sums_in[static_cast<size_t>(r)];
        std::copy(t.f32(), t.f32() + t.numel(), b.packed.begin() + shard_begin(b, r));
    }
    unpack(b);
    b.packed = {};  // its memory goes
    b.sums_in.clear();
    b.gathered = true;
    return true;
}

bool ReplicaGradSum::try_finish() {
    if (!in_flight()) throw std::logic_error("replica sum: nothing in flight");
    if (unstarted_ > 0)
        throw std::logic_error(fmt::format("replica sum of step {}: finishing with {} bucket(s) not started",
                                           step_, unstarted_));
    for (size_t k = 0; k < buckets_.size(); ++k)  // every bucket's rounds as far as they can go
        if (!buckets_[k].gathered && try_reduce(k) && try_gather(k)) ++gathered_;
    if (gathered_ < buckets_.size()) return false;
    slots_ = nullptr;
    buckets_.clear();
    return true;
}

std::string ReplicaGradSum::waits_for() const {
    if (!in_flight()) return "no replica sum";
    if (unstarted_ > 0)
        return fmt::format("the replica sum of step {}: {} bucket(s) wait for the backward", step_, unstarted_);
    size_t k = 0;
    while (k + 1 < buckets_.size() && buckets_[k].gathered) ++k;
    const Bucket& b = buckets_[k];
    const auto& in = b.reduced ? b.sums_in : b.shards_in;
    std::vector<int> missing;
    for (int r = 0; r < num_replicas_; ++r)
        if (r != replica_ && (static_cast<size_t>(r) >= in.size() || !in[static_cast<size_t>(r)])) missing.push_back(r);
    return fmt::format("the replica sum of step {}: bucket {} of {}'s {} from replica{} {}", step_, k,
                       buckets_.size(), b.reduced ? "summed shards" : "shards", missing.size() > 1 ? "s" : "",
                       fmt::join(missing, ", "));
}

}  // namespace nb

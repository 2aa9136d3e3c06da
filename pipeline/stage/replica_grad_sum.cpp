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
    return static_cast<int64_t>(b.packed.size()) * replica / num_replicas_;
}

MessageTag ReplicaGradSum::tag(Channel channel, size_t bucket) const {
    return {channel, (step_ * num_stages_ + stage_) * tag_stride_ + static_cast<int64_t>(bucket)};
}

void ReplicaGradSum::pack(Bucket& b) const {
    size_t n = 0;
    for (int i = b.first_slot; i < b.end_slot; ++i) n += static_cast<size_t>((*grads_)[i].numel());
    b.packed.resize(n);
    float* at = b.packed.data();
    for (int i = b.first_slot; i < b.end_slot; ++i) {
        const Tensor& t = (*grads_)[i];
        std::memcpy(at, t.f32(), t.bytes());
        at += t.numel();
    }
}

void ReplicaGradSum::unpack(const Bucket& b) {
    const float* at = b.packed.data();
    for (int i = b.first_slot; i < b.end_slot; ++i) {
        Tensor& t = (*grads_)[i];
        std::memcpy(t.f32(), at, t.bytes());
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

void ReplicaGradSum::start(int64_t step, TensorSet& grads) {
    if (in_flight())
        throw std::logic_error(fmt::format("replica sum of step {} started while step {}'s is in flight", step, step_));
    grads_ = &grads;
    step_ = step;
    gathered_ = 0;
    buckets_.clear();
    // Whole slots in layout order, each bucket up to kBucketBytes (a larger slot is a bucket of its own).
    for (int i = 0; i < grads.size();) {
        Bucket b;
        b.first_slot = i;
        size_t bytes = 0;
        do bytes += grads[i++].bytes();
        while (i < grads.size() && bytes + grads[i].bytes() <= kBucketBytes);
        b.end_slot = i;
        buckets_.push_back(std::move(b));
    }
    if (static_cast<int64_t>(buckets_.size()) > tag_stride_)
        throw std::logic_error(fmt::format("replica sum: {} buckets exceed the tag stride {}", buckets_.size(), tag_stride_));
    for (size_t k = 0; k < buckets_.size(); ++k) {
        pack(buckets_[k]);
        post_shard_receives(k);
        send_shards(k);
    }
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
    b = Bucket{};  // its memory goes
    return true;
}

bool ReplicaGradSum::try_finish() {
    if (!in_flight()) throw std::logic_error("replica sum: nothing in flight");
    for (size_t k = gathered_; k < buckets_.size(); ++k) try_reduce(k);  // every bucket's round 1 as it can
    while (gathered_ < buckets_.size() && buckets_[gathered_].reduced && try_gather(gathered_)) ++gathered_;
    if (gathered_ < buckets_.size()) return false;
    grads_ = nullptr;
    buckets_.clear();
    return true;
}

std::string ReplicaGradSum::waits_for() const {
    if (!in_flight()) return "no replica sum";
    const Bucket& b = buckets_[gathered_];
    const auto& in = b.reduced ? b.sums_in : b.shards_in;
    std::vector<int> missing;
    for (int r = 0; r < num_replicas_; ++r)
        if (r != replica_ && (static_cast<size_t>(r) >= in.size() || !in[static_cast<size_t>(r)])) missing.push_back(r);
    return fmt::format("the replica sum of step {}: bucket {} of {}'s {} from replica{} {}", step_, gathered_,
                       buckets_.size(), b.reduced ? "summed shards" : "shards", missing.size() > 1 ? "s" : "",
                       fmt::join(missing, ", "));
}

}  // namespace nb

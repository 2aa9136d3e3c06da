#include "pipeline/transport/nccl_replica_sum.h"

#include <optional>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "cuda/context.h"
#include "cuda/cuda_check.h"
#include "cuda/cuda_ops.h"
#include "cuda/replica_order_sum.h"
#include "pipeline/transport/nccl_event.h"

namespace nb {

namespace {

cuda::CudaContext& context_of(Ops& ops) {
    auto* gpu = dynamic_cast<cuda::CudaOps*>(&ops);
    if (!gpu) throw std::logic_error("the NCCL replica sum needs the CUDA backend (--device cuda)");
    return gpu->context();
}

// Every pair of the group exchanges one float, each pair waited for, in one order on every rank: replica r
// meets r' < r first, then r' > r (within a pair: the lower sends first, then receives).
void connect(NcclReplicaGroup& g) {
    float* bytes = nullptr;  // [0] sent, [1] received; their values are never looked at
    CUDA_CHECK(cudaMalloc(&bytes, 2 * sizeof(float)));
    for (int peer = 0; peer < g.replicas; ++peer) {
        if (peer == g.replica) continue;
        check_nccl(ncclGroupStart(), "ncclGroupStart");
        check_nccl(ncclSend(bytes, 1, ncclFloat, peer, g.comm, g.stream), "ncclSend");
        check_nccl(ncclRecv(bytes + 1, 1, ncclFloat, peer, g.comm, g.stream), "ncclRecv");
        check_nccl(ncclGroupEnd(), "ncclGroupEnd");
        CUDA_CHECK(cudaStreamSynchronize(g.stream));
    }
    CUDA_CHECK(cudaFree(bytes));
}

class NcclReplicaSum final : public ReplicaSum {
public:
    NcclReplicaSum(NcclReplicaGroup& group, cuda::CudaContext& gpu) : group_(group), compute_(gpu.stream) {}

    ~NcclReplicaSum() override {
        if (in_flight()) cudaStreamSynchronize(group_.stream);  // no buffer back to the allocator while in use
        cudaGetLastError();
    }

    void begin(int64_t step, std::vector<Tensor>& slots) override {
        if (in_flight())
            throw std::logic_error(
                fmt::format("replica sum of step {} started while step {}'s is in flight", step, step_));
        slots_ = &slots;
        step_ = step;
        buckets_.clear();
        for (const SlotBucket& s : bucket_slots(slots, kBucketBytes)) buckets_.push_back(allocate(s));
        unstarted_ = buckets_.size();
    }

    void slots_done_from(int first) override {
        if (!in_flight()) throw std::logic_error("replica sum: slots done with no sum begun");
        if (unstarted_ == 0 || buckets_[unstarted_ - 1].slots.first < first) return;
        // The slots were written, and the buffers taken, in compute-stream order.
        CudaEvent::recorded_on(compute_).order_before(group_.stream);
        while (unstarted_ > 0 && buckets_[unstarted_ - 1].slots.first >= first) queue(buckets_[--unstarted_]);
        if (unstarted_ == 0) done_ = CudaEvent::recorded_on(group_.stream);
    }

    bool try_finish() override {
        if (!in_flight()) throw std::logic_error("replica sum: nothing in flight");
        if (unstarted_ > 0)
            throw std::logic_error(fmt::format("replica sum of step {}: finishing with {} bucket(s) not started",
                                               step_, unstarted_));
        if (!done_.completed()) {
            ncclResult_t async = ncclSuccess;
            check_nccl(ncclCommGetAsyncError(group_.comm, &async), "ncclCommGetAsyncError");
            check_nccl(async, "the replica sum's NCCL calls");
            return false;
        }
        buckets_.clear();
        slots_ = nullptr;
        return true;
    }

    bool in_flight() const override { return slots_ != nullptr; }

    std::string waits_for() const override {
        if (!in_flight()) return "no replica sum";
        return fmt::format("the replica sum of step {} over NCCL ({} buckets, {} replicas)", step_, buckets_.size(),
                           group_.replicas);
    }

private:
    struct Bucket {
        SlotBucket slots;
        Tensor packed;                // the bucket's slots one after the other; the sum once the stream is done
        Tensor sum;                   // this replica's shard of the sum
        std::vector<Tensor> shards;   // by replica: its shard `me` of the bucket (empty at me)
    };

    int64_t begin(const Bucket& b, int replica) const {
        return shard_begin(b.packed.numel(), replica, group_.replicas);
    }
    int64_t count(const Bucket& b, int replica) const { return begin(b, replica + 1) - begin(b, replica); }
    float* at(Bucket& b, int64_t element) const { return static_cast<float*>(b.packed.data()) + element; }

    Bucket allocate(const SlotBucket& s) const {
        Bucket b;
        b.slots = s;
        int64_t n = 0;
        for (int i = s.first; i < s.end; ++i) n += slot(i).numel();
        b.packed = Tensor::empty({n}, DType::f32, Device::cuda);
        b.sum = Tensor::empty({std::max<int64_t>(count(b, group_.replica), 1)}, DType::f32, Device::cuda);
        b.shards.resize(static_cast<size_t>(group_.replicas));
        for (int r = 0; r < group_.replicas; ++r)
            if (r != group_.replica)
                b.shards[static_cast<size_t>(r)] = Tensor::empty({b.sum.numel()}, DType::f32, Device::cuda);
        return b;
    }

    Tensor& slot(int i) const { return (*slots_)[static_cast<size_t>(i)]; }

    // Slots -> packed (to_packed) or packed -> slots, on the group's stream.
    void copy_slots(Bucket& b, bool to_packed) const {
        int64_t offset = 0;
        for (int i = b.slots.first; i < b.slots.end; ++i) {
            Tensor& t = slot(i);
            void* packed = at(b, offset);
            CUDA_CHECK(cudaMemcpyAsync(to_packed ? packed : t.data(), to_packed ? t.data() : packed, t.bytes(),
                                       cudaMemcpyDeviceToDevice, group_.stream));
            offset += t.numel();
        }
    }

    void queue(Bucket& b) const {
        const int me = group_.replica, d = group_.replicas;
        const int64_t mine = count(b, me);
        copy_slots(b, true);
        // Round 1: shard r to replica r; shard `me` from every replica.
        check_nccl(ncclGroupStart(), "ncclGroupStart");
        for (int r = 0; r < d; ++r) {
            if (r == me) continue;
            if (count(b, r) > 0)
                check_nccl(ncclSend(at(b, begin(b, r)), static_cast<size_t>(count(b, r)), ncclFloat, r, group_.comm,
                                    group_.stream),
                           "ncclSend");
            if (mine > 0)
                check_nccl(ncclRecv(b.shards[static_cast<size_t>(r)].data(), static_cast<size_t>(mine), ncclFloat, r,
                                    group_.comm, group_.stream),
                           "ncclRecv");
        }
        check_nccl(ncclGroupEnd(), "ncclGroupEnd");
        // The sum of shard `me` in replica order.
        std::vector<const float*> parts;
        for (int r = 0; r < d; ++r)
            parts.push_back(r == me ? at(b, begin(b, me))
                                    : static_cast<const float*>(b.shards[static_cast<size_t>(r)].data()));
        cuda::sum_in_order_async(static_cast<float*>(b.sum.data()), parts, mine, group_.stream);
        // Round 2: the summed shard to every replica; theirs into the packed buffer.
        check_nccl(ncclGroupStart(), "ncclGroupStart");
        for (int r = 0; r < d; ++r) {
            if (r == me) continue;
            if (mine > 0)
                check_nccl(ncclSend(b.sum.data(), static_cast<size_t>(mine), ncclFloat, r, group_.comm, group_.stream),
                           "ncclSend");
            if (count(b, r) > 0)
                check_nccl(ncclRecv(at(b, begin(b, r)), static_cast<size_t>(count(b, r)), ncclFloat, r, group_.comm,
                                    group_.stream),
                           "ncclRecv");
        }
        check_nccl(ncclGroupEnd(), "ncclGroupEnd");
        if (mine > 0)
            CUDA_CHECK(cudaMemcpyAsync(at(b, begin(b, me)), b.sum.data(), static_cast<size_t>(mine) * sizeof(float),
                                       cudaMemcpyDeviceToDevice, group_.stream));
        copy_slots(b, false);
    }

    NcclReplicaGroup& group_;
    cudaStream_t compute_;
    std::vector<Tensor>* slots_ = nullptr;
    int64_t step_ = 0;
    std::vector<Bucket> buckets_;
    size_t unstarted_ = 0;  // buckets [0, unstarted_) wait for their slots (they start from the last)
    CudaEvent done_;        // on the group's stream, after the last bucket's copy back
};

}  // namespace

NcclReplicaGroup::~NcclReplicaGroup() {
    if (stream) cudaStreamSynchronize(stream);
    if (comm) ncclCommDestroy(comm);
    if (stream) cudaStreamDestroy(stream);
    cudaGetLastError();
}

NcclJobComms make_nccl_job_comms(Ops& ops, int stage, int num_stages, int replica, int replicas, int chunks) {
    CUDA_CHECK(cudaSetDevice(context_of(ops).device));  // NCCL binds its communicators to the current GPU
    ncclComm_t world = init_nccl_world();
    NcclJobComms comms;
    comms.links = std::make_unique<NcclLinks>(world, stage, num_stages, replica);
    for (int c = 0; c < chunks; ++c) {
        auto g = std::make_unique<NcclReplicaGroup>();
        check_nccl(ncclCommSplit(world, stage, replica, &g->comm, nullptr), "ncclCommSplit");
        check_nccl(ncclCommUserRank(g->comm, &g->replica), "ncclCommUserRank");
        check_nccl(ncclCommCount(g->comm, &g->replicas), "ncclCommCount");
        if (g->replica != replica || g->replicas != replicas)
            throw RuntimeError(fmt::format("ncclCommSplit put replica {} of {} at rank {} of {}", replica, replicas,
                                           g->replica, g->replicas));
        CUDA_CHECK(cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking));
        comms.groups.push_back(std::move(g));
    }
    check_nccl(ncclCommDestroy(world), "ncclCommDestroy");
    for (auto& g : comms.groups) connect(*g);
    return comms;
}

std::unique_ptr<ReplicaSum> make_nccl_replica_sum(NcclReplicaGroup& group, Ops& ops) {
    return std::make_unique<NcclReplicaSum>(group, context_of(ops));
}

}  // namespace nb

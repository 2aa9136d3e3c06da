#include "pipeline/transport/nccl_transport.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstdlib>
#include <deque>
#include <map>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "cuda/context.h"
#include "cuda/cuda_check.h"
#include "cuda/cuda_ops.h"
#include "src/core/error.h"
#include "pipeline/transport/nccl_event.h"
#include "pipeline/transport/nccl_links.h"

namespace nb {

namespace {

// How long wait_for_progress sleeps while a transfer is on the GPU before the runner looks again: well under
// the time of a forward, and long enough that a waiting rank leaves its core to others.
constexpr auto kPollInterval = std::chrono::microseconds(20);
// How long abort() gives NCCL's own abort before ending the job regardless.
constexpr int kNcclAbortWaitMs = 1000;

// An announcement: {channel, index, bytes, dtype}, as doubles (exact for every integer below 2^53).
constexpr size_t kAnnouncementValues = 4;

bool is_device_channel(Channel channel) {
    return channel == Channel::activation || channel == Channel::gradient || channel == Channel::eval_activation;
}

// A device tensor NCCL is reading, kept alive until it is done.
struct SentTensor {
    Tensor tensor;
    CudaEvent sent;  // on the link's stream, after the ncclSend
};

// This stage -> a neighbour.
struct OutLink {
    NcclLink* wire = nullptr;
    int64_t next_number = 0;           // of the next device message (its announcement's index)
    std::deque<SentTensor> in_flight;  // in issue order, which is completion order (one stream)
};

// A neighbour -> this stage.
struct InLink {
    NcclLink* wire = nullptr;
    int64_t next_number = 0;   // the announcement to take next
    bool listening = false;    // the receive of announcement `next_number` is posted in the inner transport
    int64_t unannounced = 0;   // posted receives from this peer whose announcement has not come yet
};

// A device message on its way in: posted by the runner, announced by the sender, or both (in either order).
struct DeviceRecv {
    bool posted = false;        // post_recv has been called
    bool issued = false;        // its announcement came and its ncclRecv is issued
    bool seen_landed = false;   // wait_for_progress has reported it landed
    Tensor buffer;              // the posted shape; until posted, 1-D of the announced size
    CudaEvent buffer_free;          // compute stream, right after `buffer` was allocated (until the ncclRecv waits)
    CudaEvent landed;               // link stream, after the ncclRecv
};

class NcclTransport final : public Transport {
public:
    NcclTransport(std::unique_ptr<Transport> inner, cuda::CudaContext& gpu, std::unique_ptr<NcclLinks> links)
        : inner_(std::move(inner)), compute_(gpu.stream), links_(std::move(links)) {
        for (NcclLink& link : links_->all()) {
            if (link.outgoing)
                out_[link.peer].wire = &link;
            else
                in_[link.peer].wire = &link;
        }
    }

    ~NcclTransport() override {
        // After finish() nothing is in flight. After a failure (the job is ending) wait anyway, so that no
        // buffer goes back to the allocator while NCCL may still use it.
        for (NcclLink& link : links_->all())
            if (link.stream) cudaStreamSynchronize(link.stream);
        cudaGetLastError();
    }

    int stage() const override { return inner_->stage(); }
    int num_stages() const override { return inner_->num_stages(); }

    // ---- tensors ----

    void send(int to, MessageTag tag, const Tensor& tensor) override {
        require_runtime_channel(tag);
        OutLink* link = device_route_out(to, tag.channel);
        if (!link) {
            inner_->send(to, tag, tensor.to(Device::cpu));
            return;
        }
        reap_sends();
        pump_all();  // receives issued early overlap the compute that follows
        // The runner's tensors are on the GPU already; a host tensor is copied there, so that the route
        // depends on (peer, channel) alone, as the receiver assumes.
        Tensor t = tensor.to(Device::cuda);
        const int64_t number = link->next_number++;
        inner_->send_values(to, {Channel::announce, number},
                            {static_cast<double>(tag.channel), static_cast<double>(tag.index),
                             static_cast<double>(t.bytes()), static_cast<double>(t.dtype())});
        const NcclLink& wire = *link->wire;
        CudaEvent::recorded_on(compute_).order_before(wire.stream);  // the tensor was produced on the compute stream
        check_nccl(ncclSend(t.data(), t.bytes(), ncclUint8, wire.peer_rank, wire.comm, wire.stream), "ncclSend");
        link->in_flight.push_back({std::move(t), CudaEvent::recorded_on(wire.stream)});
    }

    void post_recv(int from, MessageTag tag, const Shape& shape, DType dtype) override {
        require_runtime_channel(tag);
        InLink* link = device_route_in(from, tag.channel);
        if (!link) {
            inner_->post_recv(from, tag, shape, dtype);
            return;
        }
        DeviceRecv& r = recvs_[{from, tag}];
        if (r.posted)
            throw std::logic_error(fmt::format("receive of {} from stage {} posted twice", describe(tag), from));
        r.posted = true;
        if (r.issued) {  // announced before it was posted: claim the buffer it lands in
            require_size(r.buffer.bytes(), r.buffer.dtype(), shape, dtype, tag, from);
            r.buffer = r.buffer.reshaped(shape);
            return;
        }
        r.buffer = Tensor::empty(shape, dtype, Device::cuda);
        r.buffer_free = CudaEvent::recorded_on(compute_);
        ++link->unannounced;
        listen(*link);
    }

    std::optional<Tensor> try_take(int from, MessageTag tag) override {
        require_runtime_channel(tag);
        if (!device_route_in(from, tag.channel)) {
            std::optional<Tensor> t = inner_->try_take(from, tag);
            if (t) *t = t->to(Device::cuda);
            return t;
        }
        auto it = recvs_.find({from, tag});
        if (it == recvs_.end() || !it->second.posted)
            throw std::logic_error(
                fmt::format("takes {} from stage {} without posting its receive", describe(tag), from));
        // Every link, not only this one: the runner asks for one message at a time, and the others' transfers
        // should start as soon as they are announced. May issue this receive (std::map: `it` stays valid).
        pump_all();
        DeviceRecv& r = it->second;
        if (!r.issued || !r.landed.completed()) return std::nullopt;
        Tensor t = std::move(r.buffer);
        recvs_.erase(it);
        return t;
    }

    // ---- host doubles and collectives: the inner transport's ----

    void send_values(int to, MessageTag tag, std::vector<double> values) override {
        require_runtime_channel(tag);
        inner_->send_values(to, tag, std::move(values));
    }
    void post_recv_values(int from, MessageTag tag, size_t max_count) override {
        require_runtime_channel(tag);
        inner_->post_recv_values(from, tag, max_count);
    }
    std::optional<std::vector<double>> try_take_values(int from, MessageTag tag) override {
        require_runtime_channel(tag);
        return inner_->try_take_values(from, tag);
    }
    void start_allgather(MessageTag tag, std::vector<double> values, const std::vector<int64_t>& counts) override {
        inner_->start_allgather(tag, std::move(values), counts);
    }
    std::optional<std::vector<std::vector<double>>> try_take_allgather(MessageTag tag) override {
        return inner_->try_take_allgather(tag);
    }

    // ---- waiting, the end, the fault path ----

    bool wait_for_progress(std::chrono::milliseconds limit) override {
        reap_sends();
        bool moved = pump_all();
        if (moved) return true;  // a receive was issued: the runner may take it soon
        bool on_gpu = false;
        for (auto& [key, r] : recvs_) {
            if (!r.issued || r.seen_landed) continue;
            if (r.landed.completed())
                r.seen_landed = moved = true;
            else
                on_gpu = true;
        }
        if (moved) return true;
        if (on_gpu) {
            // Nothing in MPI would wake us when a transfer lands: look again soon instead of blocking there.
            check_async_errors();
            std::this_thread::sleep_for(kPollInterval);
            return true;
        }
        return inner_->wait_for_progress(limit);  // an announcement (posted while a receive waits for one) wakes it
    }

    void finish() override {
        inner_->finish();  // every announcement and host message delivered
        // The receivers issue the matching receives as they take the announcements, without further help.
        for (auto& [peer, link] : out_) {
            for (const SentTensor& s : link.in_flight) s.sent.wait();
            link.in_flight.clear();
        }
    }

    [[noreturn]] void abort(int exit_code) override {
        links_->abort_briefly(kNcclAbortWaitMs);
        inner_->abort(exit_code);
        std::_Exit(exit_code);  // not reached: the inner abort ends the job (this only satisfies [[noreturn]])
    }

private:
    using RecvKey = std::pair<int, MessageTag>;  // from, tag

    // Channel::announce is this transport's own: the runtime must not use it.
    static void require_runtime_channel(MessageTag tag) {
        if (tag.channel == Channel::announce)
            throw std::logic_error(fmt::format("{} is the NCCL transport's own channel", describe(tag)));
    }

    OutLink* device_route_out(int to, Channel channel) {
        if (!is_device_channel(channel)) return nullptr;
        auto it = out_.find(to);
        return it == out_.end() ? nullptr : &it->second;
    }

    InLink* device_route_in(int from, Channel channel) {
        if (!is_device_channel(channel)) return nullptr;
        auto it = in_.find(from);
        return it == in_.end() ? nullptr : &it->second;
    }

    static void require_size(size_t bytes, DType dtype, const Shape& shape, DType posted_dtype, MessageTag tag,
                             int from) {
        const size_t posted_bytes = static_cast<size_t>(shape_numel(shape)) * dtype_bytes(posted_dtype);
        if (bytes != posted_bytes || dtype != posted_dtype)
            throw std::logic_error(fmt::format("{} from stage {} has {} bytes of {}, the receive expected {} bytes "
                                               "of {}",
                                               describe(tag), from, bytes, dtype_name(dtype), posted_bytes,
                                               dtype_name(posted_dtype)));
    }

    // Posts the receive of the link's next announcement while a posted receive waits for one.
    void listen(InLink& link) {
        if (link.listening || link.unannounced == 0) return;
        inner_->post_recv_values(link.wire->peer, {Channel::announce, link.next_number}, kAnnouncementValues);
        link.listening = true;
    }

    // Takes the link's announcements that have come, in number order, issuing a receive for each; true if any.
    bool pump(InLink& link) {
        bool any = false;
        while (link.listening) {
            std::optional<std::vector<double>> header =
                inner_->try_take_values(link.wire->peer, {Channel::announce, link.next_number});
            if (!header) break;
            link.listening = false;
            ++link.next_number;
            issue_recv(link, *header);
            listen(link);
            any = true;
        }
        return any;
    }

    bool pump_all() {
        bool any = false;
        for (auto& [peer, link] : in_) any |= pump(link);
        return any;
    }

    // The ncclRecv of an announced message, into its posted buffer or a fresh one.
    void issue_recv(InLink& link, const std::vector<double>& header) {
        const int from = link.wire->peer;
        if (header.size() != kAnnouncementValues)
            throw std::logic_error(fmt::format("an announcement from stage {} has {} values", from, header.size()));
        const MessageTag tag{static_cast<Channel>(static_cast<int>(header[0])), static_cast<int64_t>(header[1])};
        const auto bytes = static_cast<size_t>(header[2]);
        const auto dtype = static_cast<DType>(static_cast<int>(header[3]));
        DeviceRecv& r = recvs_[{from, tag}];
        if (r.issued) throw std::logic_error(fmt::format("{} from stage {} announced twice", describe(tag), from));
        if (r.posted) {
            require_size(bytes, dtype, r.buffer.shape(), r.buffer.dtype(), tag, from);
            --link.unannounced;
        } else {
            if (bytes % dtype_bytes(dtype) != 0)
                throw std::logic_error(fmt::format("{} from stage {} announces {} bytes of {}", describe(tag), from,
                                                   bytes, dtype_name(dtype)));
            r.buffer = Tensor::empty({static_cast<int64_t>(bytes / dtype_bytes(dtype))}, dtype, Device::cuda);
            r.buffer_free = CudaEvent::recorded_on(compute_);
        }
        const NcclLink& wire = *link.wire;
        r.buffer_free.order_before(wire.stream);  // the allocator's block is free once compute has passed here
        r.buffer_free = CudaEvent();                  // the wait is queued: the event may go
        check_nccl(ncclRecv(r.buffer.data(), bytes, ncclUint8, wire.peer_rank, wire.comm, wire.stream), "ncclRecv");
        r.landed = CudaEvent::recorded_on(wire.stream);
        r.issued = true;
    }

    // Lets go of the sent tensors NCCL has finished reading.
    void reap_sends() {
        for (auto& [peer, link] : out_)
            while (!link.in_flight.empty() && link.in_flight.front().sent.completed()) link.in_flight.pop_front();
    }

    // A failure NCCL found on its own (a peer or the network gone) while we wait for a transfer.
    void check_async_errors() {
        for (NcclLink& link : links_->all()) {
            ncclResult_t state = ncclSuccess;
            check_nccl(ncclCommGetAsyncError(link.comm, &state), "ncclCommGetAsyncError");
            if (state != ncclSuccess && state != ncclInProgress)
                check_nccl(state, fmt::format("the NCCL link {} stage {}", link.outgoing ? "to" : "from", link.peer)
                                      .c_str());
        }
    }

    std::unique_ptr<Transport> inner_;
    cudaStream_t compute_;
    std::unique_ptr<NcclLinks> links_;
    std::map<int, OutLink> out_;  // by peer: the neighbours only
    std::map<int, InLink> in_;
    std::map<RecvKey, DeviceRecv> recvs_;
};

}  // namespace

static cuda::CudaContext& cuda_context_of(Ops& ops) {
    auto* gpu = dynamic_cast<cuda::CudaOps*>(&ops);
    if (!gpu) throw std::logic_error("NCCL needs the CUDA backend (--device cuda)");
    return gpu->context();
}

std::unique_ptr<Transport> make_nccl_transport(std::unique_ptr<Transport> inner, Ops& ops) {
    cuda::CudaContext& gpu = cuda_context_of(ops);
    CUDA_CHECK(cudaSetDevice(gpu.device));  // the backend's GPU: NCCL binds its communicators to the current one
    auto links = std::make_unique<NcclLinks>(inner->stage(), inner->num_stages());
    return std::make_unique<NcclTransport>(std::move(inner), gpu, std::move(links));
}

std::unique_ptr<Transport> make_nccl_transport(std::unique_ptr<Transport> inner, Ops& ops,
                                               std::unique_ptr<NcclLinks> links) {
    return std::make_unique<NcclTransport>(std::move(inner), cuda_context_of(ops), std::move(links));
}

}  // namespace nb

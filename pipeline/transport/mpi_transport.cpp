#include "pipeline/transport/mpi_transport.h"

#include <mpi.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <list>
#include <map>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "src/core/error.h"
#include "src/core/job_failure.h"
#include "src/core/mpi_env.h"

namespace nb {

namespace {

void check_mpi(int rc, const char* what) {
    if (rc == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, text, &len);
    throw RuntimeError(fmt::format("{} failed: {}", what, std::string(text, static_cast<size_t>(len))));
}

int checked_count(size_t count, const char* what) {
    if (count > static_cast<size_t>(INT_MAX))
        throw std::logic_error(fmt::format("{}: {} elements exceed one MPI message", what, count));
    return static_cast<int>(count);
}

// A receive posted ahead of need: the request, and the buffer it lands in.
struct PendingRecv {
    MPI_Request request = MPI_REQUEST_NULL;
    bool arrived = false;
    Tensor tensor;               // tensor receives
    std::vector<double> values;  // value receives (sized to the most that may come)
    int received_count = 0;      // doubles that came
};

struct PendingGather {
    MPI_Request request = MPI_REQUEST_NULL;
    bool arrived = false;
    std::vector<double> mine, all;
    std::vector<int> counts, displs;
};

// A send in flight: its request, and a reference to what it reads, kept alive until it completes.
struct PendingSend {
    MPI_Request request = MPI_REQUEST_NULL;
    Tensor tensor;
    std::vector<double> values;
};

// The progress helper. Without a single-copy mechanism (Open MPI's vader with single_copy_mechanism=none, as in
// containers), a message larger than the eager limit (4 KiB; an activation is hundreds of KiB) moves only while
// *both* ranks are inside MPI: the receiver answers the sender's first fragment, then the sender pushes the
// rest, fragment by fragment. A sender that went on computing right after MPI_Isend would push nothing until its
// next MPI call, one forward or backward later, while the receiver waits: the pipeline serialises (2bw on 2
// ranks measured 21% bubble without the helper, 3% with it, and 1.2x the tokens/s). So while anything is in
// flight a helper thread turns MPI's progress engine every kProgressInterval (one MPI_Testsome over the pending
// requests), and transfers proceed while both ranks compute. Each turn interrupts the rank's compute on its
// core: at 100 us the interruptions cost ~10% of the compute, at 1 ms nothing measurable, and a transfer then
// waits at most ~1 ms against forwards and backwards of tens of ms. MPI is initialised MPI_THREAD_SERIALIZED
// (src/core/mpi_env.h); every MPI call of this transport, the helper's too, holds mutex_. The helper starts with the
// first message (after the setup's collectives, which the driver calls outside the transport) and stops in
// finish(). Where MPI grants less than SERIALIZED there is no helper, only slower transfers.
// NOBUBBLE_MPI_PROGRESS_US overrides the interval (0: no helper), for measuring it.
constexpr auto kProgressInterval = std::chrono::microseconds(1000);

// wait_for_progress's sleeps between its polls where the ranks oversubscribe the cores: the first, and the
// longest (it doubles up to it). A message that arrives meanwhile is seen within ~kMaxPause.
constexpr auto kFirstPause = std::chrono::microseconds(50);
constexpr auto kMaxPause = std::chrono::microseconds(2000);

// Whether this node's ranks outnumber the cores they may run on (collective over `comm`). The cores are the union
// of the ranks' CPU affinity masks, not the node's count: under Slurm with -O, or mpirun binding inside a one-CPU
// allocation, two ranks bound to one core must not spin (a resumed 2-rank run took 230 s instead of 4 so).
bool ranks_oversubscribe_cores(MPI_Comm comm) {
    MPI_Comm node = MPI_COMM_NULL;
    check_mpi(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node), "MPI_Comm_split_type");
    int ranks = 1;
    MPI_Comm_size(node, &ranks);
    cpu_set_t mine;
    CPU_ZERO(&mine);
    if (sched_getaffinity(0, sizeof mine, &mine) != 0) {  // no mask to read: every core of the node
        for (unsigned c = 0; c < std::thread::hardware_concurrency() && c < CPU_SETSIZE; ++c) CPU_SET(c, &mine);
    }
    cpu_set_t all;
    check_mpi(MPI_Allreduce(&mine, &all, static_cast<int>(sizeof mine), MPI_BYTE, MPI_BOR, node), "MPI_Allreduce");
    MPI_Comm_free(&node);
    return ranks > CPU_COUNT(&all);
}

std::chrono::microseconds progress_interval() {
    const char* e = std::getenv("NOBUBBLE_MPI_PROGRESS_US");
    return e ? std::chrono::microseconds(std::max(0, std::atoi(e))) : kProgressInterval;
}

class MpiTransport final : public Transport {
public:
    // color < 0: every rank of the job (MPI_COMM_WORLD, duplicated); else the ranks of the same color, numbered in
    // world order.
    explicit MpiTransport(int color) {
        if (color < 0)
            check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup");
        else
            check_mpi(MPI_Comm_split(MPI_COMM_WORLD, color, mpi_world_rank(), &comm_), "MPI_Comm_split");
        MPI_Comm_rank(comm_, &rank_);
        MPI_Comm_size(comm_, &size_);
        void* attr = nullptr;
        int flag = 0;
        MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &attr, &flag);
        const int tag_ub = flag ? *static_cast<int*>(attr) : 32767;  // 32767: the least MPI guarantees
        indices_per_channel_ = tag_ub / kNumChannels;
        oversubscribed_ = ranks_oversubscribe_cores(MPI_COMM_WORLD);  // the node's ranks, of every communicator
    }

    ~MpiTransport() override {
        // A normal end has called finish(); after a failure the job is being aborted anyway.
        stop_progress();
        std::lock_guard lock(mutex_);
        MPI_Comm_free(&comm_);
    }

    int stage() const override { return rank_; }
    int num_stages() const override { return size_; }

    void send(int to, MessageTag tag, const Tensor& tensor) override {
        start_progress();
        std::lock_guard lock(mutex_);
        require_host(tensor, tag);
        PendingSend& s = start_send();
        s.tensor = tensor;
        check_mpi(MPI_Isend(s.tensor.data(), checked_count(s.tensor.bytes(), "send"), MPI_BYTE, to, mpi_tag(tag), comm_,
                            &s.request),
                  "MPI_Isend");
    }

    void post_recv(int from, MessageTag tag, const Shape& shape, DType dtype) override {
        start_progress();
        std::lock_guard lock(mutex_);
        PendingRecv& r = new_recv(from, tag);
        r.tensor = Tensor::zeros(shape, dtype);
        check_mpi(MPI_Irecv(r.tensor.data(), checked_count(r.tensor.bytes(), "receive"), MPI_BYTE, from, mpi_tag(tag),
                            comm_, &r.request),
                  "MPI_Irecv");
    }

    std::optional<Tensor> try_take(int from, MessageTag tag) override {
        std::lock_guard lock(mutex_);
        auto it = find_recv(from, tag);
        if (!poll(it->second)) return std::nullopt;
        if (static_cast<size_t>(it->second.received_count) != it->second.tensor.bytes())
            throw std::logic_error(fmt::format("{} from stage {} has {} bytes, the receive expected {}", describe(tag),
                                               from, it->second.received_count, it->second.tensor.bytes()));
        Tensor t = std::move(it->second.tensor);
        recvs_.erase(it);
        return t;
    }

    void send_values(int to, MessageTag tag, std::vector<double> values) override {
        start_progress();
        std::lock_guard lock(mutex_);
        PendingSend& s = start_send();
        s.values = std::move(values);
        check_mpi(MPI_Isend(s.values.data(), checked_count(s.values.size(), "send"), MPI_DOUBLE, to, mpi_tag(tag),
                            comm_, &s.request),
                  "MPI_Isend");
    }

    void post_recv_values(int from, MessageTag tag, size_t max_count) override {
        start_progress();
        std::lock_guard lock(mutex_);
        PendingRecv& r = new_recv(from, tag);
        r.values.resize(max_count);
        check_mpi(MPI_Irecv(r.values.data(), checked_count(max_count, "receive"), MPI_DOUBLE, from, mpi_tag(tag), comm_,
                            &r.request),
                  "MPI_Irecv");
    }

    std::optional<std::vector<double>> try_take_values(int from, MessageTag tag) override {
        std::lock_guard lock(mutex_);
        auto it = find_recv(from, tag);
        if (!poll(it->second)) return std::nullopt;
        std::vector<double> v = std::move(it->second.values);
        v.resize(static_cast<size_t>(it->second.received_count));
        recvs_.erase(it);
        return v;
    }

    void start_allgather(MessageTag tag, std::vector<double> values, const std::vector<int64_t>& counts) override {
        start_progress();
        std::lock_guard lock(mutex_);
        if (static_cast<int>(counts.size()) != size_ ||
            static_cast<int64_t>(values.size()) != counts[static_cast<size_t>(rank_)])
            throw std::logic_error(fmt::format("all-gather {} with {} values, counts for {} stages", describe(tag),
                                               values.size(), counts.size()));
        auto [it, fresh] = gathers_.try_emplace(tag);
        if (!fresh) throw std::logic_error(fmt::format("all-gather {} started twice", describe(tag)));
        PendingGather& g = it->second;
        g.mine = std::move(values);
        int total = 0;
        for (int64_t c : counts) {
            g.counts.push_back(checked_count(static_cast<size_t>(c), "all-gather"));
            g.displs.push_back(total);
            total += g.counts.back();
        }
        g.all.resize(static_cast<size_t>(total));
        check_mpi(MPI_Iallgatherv(g.mine.data(), g.counts[static_cast<size_t>(rank_)], MPI_DOUBLE, g.all.data(),
                                  g.counts.data(), g.displs.data(), MPI_DOUBLE, comm_, &g.request),
                  "MPI_Iallgatherv");
    }

    std::optional<std::vector<std::vector<double>>> try_take_allgather(MessageTag tag) override {
        std::lock_guard lock(mutex_);
        auto it = gathers_.find(tag);
        if (it == gathers_.end())
            throw std::logic_error(fmt::format("all-gather {} was not started here", describe(tag)));
        PendingGather& g = it->second;
        if (!g.arrived) {
            int done = 0;
            check_mpi(MPI_Test(&g.request, &done, MPI_STATUS_IGNORE), "MPI_Test");
            if (!done) return std::nullopt;
        }
        std::vector<std::vector<double>> all;
        for (size_t s = 0; s < g.counts.size(); ++s)
            all.emplace_back(g.all.begin() + g.displs[s], g.all.begin() + g.displs[s] + g.counts[s]);
        gathers_.erase(it);
        return all;
    }

    // Waits for a posted receive or started all-gather to complete, for at most `limit`, and marks it so that
    // the next try_take of it succeeds. Sends complete on their own (their receives are posted ahead), so they
    // are not waited for. It polls (MPI_Testsome, one turn of the progress engine: look_for_progress) rather
    // than blocking in MPI_Waitany, which cannot time out: a rank waiting for a dead or wedged peer would wait
    // forever, and its watchdog could never fire. Between polls, mutex_ released (the helper may turn the
    // engine meanwhile):
    //   a core per rank   no pause, as MPI_Waitany spins. Sleeping costs throughput even in short pauses: a
    //                     large message moves only while the receiver is inside MPI too (the helper's comment
    //                     above), and 2bw on 2 ranks on 2 cores measured 3% bubble spinning, 7-8% with pauses of
    //                     up to 200 us, 11% with pauses of up to 2 ms (bench schedules, 6.9k vs 6.4k tokens/s);
    //   oversubscribed    (more ranks on this node than it has cores) a spinning rank takes the core of a rank
    //                     that computes, so it sleeps kFirstPause, then twice as long each time up to kMaxPause
    //                     (3 ranks on 2 cores: 1f1b 5.4k tokens/s sleeping, 3.6-4.7k spinning in MPI_Waitany).
    bool wait_for_progress(std::chrono::milliseconds limit) override {
        const auto deadline = std::chrono::steady_clock::now() + limit;
        std::chrono::microseconds pause = kFirstPause;
        for (;;) {
            if (look_for_progress()) return true;
            const auto now = std::chrono::steady_clock::now();
            if (now >= deadline) return false;
            if (!oversubscribed_) continue;
            std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(pause, deadline - now));
            pause = std::min(pause * 2, kMaxPause);
        }
    }

    void finish() override {
        stop_progress();
        std::lock_guard lock(mutex_);
        std::vector<MPI_Request> requests;
        for (auto& s : sends_) requests.push_back(s.request);
        check_mpi(MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
        sends_.clear();
    }

    // The failure was reported (src/core/job_failure.h); the other ranks end at their next wait.
    [[noreturn]] void abort(int exit_code) override { end_process_after_failure(exit_code); }

private:
    using RecvKey = std::pair<int, MessageTag>;  // from, tag

    void start_progress() {
        if (helper_.joinable() || helper_stopped_ || !mpi_threads_serialized()) return;
        const auto interval = progress_interval();
        if (interval.count() == 0) return;
        helper_ = std::thread([this, interval] {
            while (!stop_.load(std::memory_order_relaxed)) {
                try {
                    std::lock_guard lock(mutex_);
                    progress_pending();
                } catch (const std::exception&) {
                    return;  // the main thread meets the same MPI error at its next call and reports it
                }
                std::this_thread::sleep_for(interval);
            }
        });
    }

    // One poll of wait_for_progress: true when the caller should look again, because a receive or all-gather
    // was marked complete since it last looked (what the helper saw complete may be what the caller waits for)
    // or because nothing it could wait for is pending (what it needs has arrived already).
    bool look_for_progress() {
        std::lock_guard lock(mutex_);
        progress_pending();
        const bool moved = newly_marked_ || !awaits_any();
        newly_marked_ = false;
        return moved;
    }

    bool awaits_any() const {
        return std::any_of(recvs_.begin(), recvs_.end(), [](const auto& r) { return !r.second.arrived; }) ||
               std::any_of(gathers_.begin(), gathers_.end(), [](const auto& g) { return !g.second.arrived; });
    }

    void stop_progress() {
        stop_.store(true);
        if (helper_.joinable()) helper_.join();
        helper_stopped_ = true;
    }

    // One pass of the helper, or of wait_for_progress's poll (under mutex_): one MPI_Testsome over everything
    // pending, which is one turn of the progress engine whatever the number of requests; what completed is
    // marked (receives, all-gathers: the main thread's next try_take finds them at once) or forgotten (sends).
    void progress_pending() {
        requests_.clear();
        owners_.clear();
        for (auto it = sends_.begin(); it != sends_.end(); ++it) {
            requests_.push_back(it->request);
            owners_.push_back({it, nullptr, nullptr});
        }
        for (auto& [key, r] : recvs_)
            if (!r.arrived) {
                requests_.push_back(r.request);
                owners_.push_back({sends_.end(), &r, nullptr});
            }
        for (auto& [tag, g] : gathers_)
            if (!g.arrived) {
                requests_.push_back(g.request);
                owners_.push_back({sends_.end(), nullptr, &g});
            }
        if (requests_.empty()) return;
        int count = 0;
        indices_.resize(requests_.size());
        statuses_.resize(requests_.size());
        check_mpi(MPI_Testsome(static_cast<int>(requests_.size()), requests_.data(), &count, indices_.data(),
                               statuses_.data()),
                  "MPI_Testsome");
        if (count == MPI_UNDEFINED) return;
        for (int k = 0; k < count; ++k) {
            const Owner& o = owners_[static_cast<size_t>(indices_[static_cast<size_t>(k)])];
            if (o.recv) {
                mark_arrived(*o.recv, statuses_[static_cast<size_t>(k)]);
                newly_marked_ = true;
            } else if (o.gather) {
                o.gather->request = MPI_REQUEST_NULL;
                o.gather->arrived = true;
                newly_marked_ = true;
            } else {
                sends_.erase(o.send);  // delivered: what it read may go
            }
        }
    }

    int mpi_tag(MessageTag tag) const {
        return static_cast<int>(tag.index % indices_per_channel_) * kNumChannels + static_cast<int>(tag.channel);
    }

    void require_host(const Tensor& t, MessageTag tag) const {
        if (t.device() != Device::cpu)
            throw std::logic_error(fmt::format("the MPI transport moves host tensors, {} is on {}", describe(tag),
                                               device_name(t.device())));
    }

    PendingRecv& new_recv(int from, MessageTag tag) {
        auto [it, fresh] = recvs_.try_emplace({from, tag});
        if (!fresh)
            throw std::logic_error(fmt::format("receive of {} from stage {} posted twice", describe(tag), from));
        return it->second;
    }

    std::map<RecvKey, PendingRecv>::iterator find_recv(int from, MessageTag tag) {
        auto it = recvs_.find({from, tag});
        if (it == recvs_.end())
            throw std::logic_error(
                fmt::format("takes {} from stage {} without posting its receive", describe(tag), from));
        return it;
    }

    // True once the receive has arrived.
    bool poll(PendingRecv& r) {
        if (r.arrived) return true;
        int done = 0;
        MPI_Status status;
        check_mpi(MPI_Test(&r.request, &done, &status), "MPI_Test");
        if (done) mark_arrived(r, status);
        return r.arrived;
    }

    static void mark_arrived(PendingRecv& r, const MPI_Status& status) {
        r.request = MPI_REQUEST_NULL;
        r.arrived = true;
        MPI_Get_count(&status, r.tensor.defined() ? MPI_BYTE : MPI_DOUBLE, &r.received_count);
    }

    PendingSend& start_send() {
        reap_sends();
        sends_.emplace_back();
        return sends_.back();
    }

    // Forgets the sends that have completed, releasing what they read.
    void reap_sends() {
        for (auto it = sends_.begin(); it != sends_.end();) {
            int done = 0;
            check_mpi(MPI_Test(&it->request, &done, MPI_STATUS_IGNORE), "MPI_Test");
            it = done ? sends_.erase(it) : std::next(it);
        }
    }

    MPI_Comm comm_ = MPI_COMM_NULL;
    int rank_ = 0, size_ = 1;
    int64_t indices_per_channel_ = 1;
    std::map<RecvKey, PendingRecv> recvs_;
    std::map<MessageTag, PendingGather> gathers_;
    std::list<PendingSend> sends_;  // a list: requests must not move while MPI writes them

    // Held by every MPI call of the process (MPI_THREAD_SERIALIZED; with D > 1 two transports, two helpers).
    std::mutex& mutex_ = mpi_call_mutex();
    std::thread helper_;
    std::atomic<bool> stop_{false};
    bool helper_stopped_ = false;
    bool oversubscribed_ = false;  // more ranks on this node than cores to run on: wait_for_progress sleeps between polls
    bool newly_marked_ = false;  // a receive or all-gather was marked complete since wait_for_progress looked
    // The helper's scratch, kept to avoid allocating every pass.
    struct Owner {
        std::list<PendingSend>::iterator send;
        PendingRecv* recv;
        PendingGather* gather;
    };
    std::vector<MPI_Request> requests_;
    std::vector<Owner> owners_;
    std::vector<int> indices_;
    std::vector<MPI_Status> statuses_;
};

}  // namespace

std::unique_ptr<Transport> make_mpi_transport() { return std::make_unique<MpiTransport>(-1); }

std::unique_ptr<Transport> make_mpi_transport_of_color(int color) { return std::make_unique<MpiTransport>(color); }

}  // namespace nb

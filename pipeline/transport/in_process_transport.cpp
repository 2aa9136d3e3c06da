#include "pipeline/transport/in_process_transport.h"

#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#include <fmt/format.h>

namespace nb {

namespace {

struct PostedTensor {
    Shape shape;
    DType dtype;
};

}  // namespace

class InProcessNetwork::Endpoint final : public Transport {
public:
    Endpoint(InProcessNetwork& net, int stage) : net_(net), stage_(stage) {}

    int stage() const override { return stage_; }
    int num_stages() const override { return net_.num_stages(); }

    void send(int to, MessageTag tag, const Tensor& tensor) override {
        check_peer(to);
        deliver(net_.tensors_, {stage_, to, tag}, tensor.clone());
    }

    void post_recv(int from, MessageTag tag, const Shape& shape, DType dtype) override {
        check_peer(from);
        if (!posted_tensors_.emplace(std::pair{from, tag}, PostedTensor{shape, dtype}).second)
            throw std::logic_error(fmt::format("receive of {} from stage {} posted twice", describe(tag), from));
    }

    std::optional<Tensor> try_take(int from, MessageTag tag) override {
        auto posted = posted_tensors_.find({from, tag});
        if (posted == posted_tensors_.end()) throw not_posted(from, tag);
        auto mail = net_.tensors_.find({from, stage_, tag});
        if (mail == net_.tensors_.end()) return std::nullopt;
        Tensor t = std::move(mail->second);
        net_.tensors_.erase(mail);
        if (t.shape() != posted->second.shape || t.dtype() != posted->second.dtype)
            throw std::logic_error(fmt::format("{} from stage {} is {} {}, the receive expected {} {}", describe(tag),
                                               from, dtype_name(t.dtype()), shape_string(t.shape()),
                                               dtype_name(posted->second.dtype), shape_string(posted->second.shape)));
        posted_tensors_.erase(posted);
        return t;
    }

    void send_values(int to, MessageTag tag, std::vector<double> values) override {
        check_peer(to);
        deliver(net_.values_, {stage_, to, tag}, std::move(values));
    }

    void post_recv_values(int from, MessageTag tag, size_t max_count) override {
        check_peer(from);
        if (!posted_values_.emplace(std::pair{from, tag}, max_count).second)
            throw std::logic_error(fmt::format("receive of {} from stage {} posted twice", describe(tag), from));
    }

    std::optional<std::vector<double>> try_take_values(int from, MessageTag tag) override {
        auto posted = posted_values_.find({from, tag});
        if (posted == posted_values_.end()) throw not_posted(from, tag);
        auto mail = net_.values_.find({from, stage_, tag});
        if (mail == net_.values_.end()) return std::nullopt;
        std::vector<double> v = std::move(mail->second);
        net_.values_.erase(mail);
        if (v.size() > posted->second)
            throw std::logic_error(fmt::format("{} from stage {} has {} values, at most {} expected", describe(tag),
                                               from, v.size(), posted->second));
        posted_values_.erase(posted);
        return v;
    }

    void start_allgather(MessageTag tag, std::vector<double> values, const std::vector<int64_t>& counts) override {
        if (static_cast<int>(counts.size()) != num_stages() ||
            static_cast<int64_t>(values.size()) != counts[static_cast<size_t>(stage_)])
            throw std::logic_error(fmt::format("all-gather {} with {} values, counts for {} stages", describe(tag),
                                               values.size(), counts.size()));
        Gather& g = net_.gathers_[tag];
        g.contributions.resize(static_cast<size_t>(num_stages()));
        auto& mine = g.contributions[static_cast<size_t>(stage_)];
        if (mine) throw std::logic_error(fmt::format("all-gather {} started twice", describe(tag)));
        mine = std::move(values);
        ++g.contributed;
    }

    std::optional<std::vector<std::vector<double>>> try_take_allgather(MessageTag tag) override {
        auto it = net_.gathers_.find(tag);
        if (it == net_.gathers_.end() || !it->second.contributions[static_cast<size_t>(stage_)])
            throw std::logic_error(fmt::format("all-gather {} was not started here", describe(tag)));
        Gather& g = it->second;
        if (g.contributed < num_stages()) return std::nullopt;
        std::vector<std::vector<double>> all;
        for (const auto& c : g.contributions) all.push_back(*c);
        if (++g.taken == num_stages()) net_.gathers_.erase(it);
        return all;
    }

    bool wait_for_progress(std::chrono::milliseconds) override { return true; }
    void finish() override {}

    [[noreturn]] void abort(int exit_code) override {
        std::fflush(stdout);
        std::fflush(stderr);
        std::_Exit(exit_code);  // every stage lives in this process
    }

private:
    void check_peer(int peer) const {
        if (peer < 0 || peer >= num_stages())
            throw std::logic_error(fmt::format("no stage {} among {}", peer, num_stages()));
    }

    template <class Mail>
    void deliver(std::map<Key, Mail>& box, const Key& key, Mail mail) {
        if (!net_.sent_.insert(key).second)
            throw std::logic_error(
                fmt::format("{} sent twice to stage {}", describe(std::get<2>(key)), std::get<1>(key)));
        box.emplace(key, std::move(mail));
    }

    std::logic_error not_posted(int from, MessageTag tag) const {
        return std::logic_error(fmt::format("takes {} from stage {} without posting its receive", describe(tag), from));
    }

    InProcessNetwork& net_;
    int stage_;
    std::map<std::pair<int, MessageTag>, PostedTensor> posted_tensors_;
    std::map<std::pair<int, MessageTag>, size_t> posted_values_;
};

InProcessNetwork::InProcessNetwork(int num_stages) {
    if (num_stages < 1) throw std::logic_error(fmt::format("an in-process network of {} stages", num_stages));
    for (int s = 0; s < num_stages; ++s) endpoints_.push_back(std::make_unique<Endpoint>(*this, s));
}

InProcessNetwork::~InProcessNetwork() = default;

Transport& InProcessNetwork::endpoint(int stage) {
    if (stage < 0 || stage >= num_stages())
        throw std::logic_error(fmt::format("no stage {} in an in-process network of {}", stage, num_stages()));
    return *endpoints_[static_cast<size_t>(stage)];
}

}  // namespace nb

#include "pipeline/transport/host_staged_transport.h"

#include <utility>

namespace nb {

namespace {

class HostStagedTransport final : public Transport {
public:
    HostStagedTransport(std::unique_ptr<Transport> inner, Device device) : inner_(std::move(inner)), device_(device) {}

    int stage() const override { return inner_->stage(); }
    int num_stages() const override { return inner_->num_stages(); }

    void send(int to, MessageTag tag, const Tensor& tensor) override { inner_->send(to, tag, tensor.to(Device::cpu)); }
    void post_recv(int from, MessageTag tag, const Shape& shape, DType dtype) override {
        inner_->post_recv(from, tag, shape, dtype);
    }
    std::optional<Tensor> try_take(int from, MessageTag tag) override {
        std::optional<Tensor> t = inner_->try_take(from, tag);
        if (t) *t = t->to(device_);
        return t;
    }

    void send_values(int to, MessageTag tag, std::vector<double> values) override {
        inner_->send_values(to, tag, std::move(values));
    }
    void post_recv_values(int from, MessageTag tag, size_t max_count) override {
        inner_->post_recv_values(from, tag, max_count);
    }
    std::optional<std::vector<double>> try_take_values(int from, MessageTag tag) override {
        return inner_->try_take_values(from, tag);
    }

    void start_allgather(MessageTag tag, std::vector<double> values, const std::vector<int64_t>& counts) override {
        inner_->start_allgather(tag, std::move(values), counts);
    }
    std::optional<std::vector<std::vector<double>>> try_take_allgather(MessageTag tag) override {
        return inner_->try_take_allgather(tag);
    }

    bool wait_for_progress(std::chrono::milliseconds limit) override { return inner_->wait_for_progress(limit); }
    void finish() override { inner_->finish(); }
    [[noreturn]] void abort(int exit_code) override { inner_->abort(exit_code); }

private:
    std::unique_ptr<Transport> inner_;
    const Device device_;
};

}  // namespace

std::unique_ptr<Transport> make_host_staged_transport(std::unique_ptr<Transport> inner, Device device) {
    if (device == Device::cpu) return inner;
    return std::make_unique<HostStagedTransport>(std::move(inner), device);
}

}  // namespace nb

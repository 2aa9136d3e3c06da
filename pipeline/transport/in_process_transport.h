// InProcessTransport: the P stages of one process (`nobubble train --stages P` without mpirun, and the tests),
// advanced by one thread. A message is a copy put in a mailbox keyed by (from, to, tag) and taken out by the
// receiver, so a stage sees exactly what it would see over MPI: values, never the sender's storage.
#pragma once

#include <map>
#include <memory>
#include <set>
#include <tuple>

#include "pipeline/transport/transport.h"

namespace nb {

class InProcessNetwork {
public:
    explicit InProcessNetwork(int num_stages);
    ~InProcessNetwork();
    InProcessNetwork(const InProcessNetwork&) = delete;
    InProcessNetwork& operator=(const InProcessNetwork&) = delete;

    int num_stages() const { return static_cast<int>(endpoints_.size()); }
    Transport& endpoint(int stage);

private:
    class Endpoint;
    friend class Endpoint;
    using Key = std::tuple<int, int, MessageTag>;  // from, to, tag

    struct Gather {
        std::vector<std::optional<std::vector<double>>> contributions;  // per stage
        int contributed = 0, taken = 0;
    };

    // Mail in flight, sent but not yet taken.
    std::map<Key, Tensor> tensors_;
    std::map<Key, std::vector<double>> values_;
    std::map<MessageTag, Gather> gathers_;
    std::set<Key> sent_;  // every message ever sent: each (from, to, tag) goes once
    std::vector<std::unique_ptr<Endpoint>> endpoints_;
};

}  // namespace nb

// ChunkTransport: the endpoint of one virtual stage on a rank that holds several (V > 1 chunks per rank; which
// virtual stage each chunk of each rank is, the ChunkStages table says: the schedule's placement,
// src/plan/stage_placement.h, made into a table by the driver). The runtime above sees P V stages; the
// rank's one transport (MPI) sees P ranks. What each call becomes:
//
//   tensors, values   to or from virtual stage t: the rank that runs it (its own rank too: zb-v's part P-1 hands
//                     to part P on rank P-1), with the tag's index made unique per chunk pair,
//                     index' = (index V + from_chunk) V + to_chunk, so that two chunks' messages between the same two
//                     ranks never match each other's receives.
//   all-gathers       every chunk of the rank starts it (the runner's optimizer steps and stop votes do, in the same
//                     order on every chunk); once the last has, the rank starts one all-gather of its chunks'
//                     contributions in chunk order, and each chunk takes the result split back into P V parts, in
//                     virtual-stage order (ChunkHub, shared by the rank's chunks).
//   waiting, abort    the rank's transport's. finish() does nothing: the driver finishes the rank's transport once.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "pipeline/transport/transport.h"

namespace nb {

// Which virtual stage chunk c of rank r is: stage_of[r][c], every rank with as many chunks, every stage in
// [0, ranks x chunks) once (std::invalid_argument otherwise).
class ChunkStages {
public:
    explicit ChunkStages(std::vector<std::vector<int>> stage_of);
    int ranks() const { return static_cast<int>(stage_of_.size()); }
    int chunks() const { return static_cast<int>(stage_of_.front().size()); }
    int parts() const { return ranks() * chunks(); }
    int part(int rank, int chunk) const;  // std::out_of_range outside the table
    int rank_of(int stage) const;         // std::out_of_range outside [0, parts())
    int chunk_of(int stage) const;

private:
    std::vector<std::vector<int>> stage_of_;
    std::vector<int> rank_of_, chunk_of_;  // by stage
};

// What a rank's chunks share: the rank's transport and the all-gathers they have started.
class ChunkHub {
public:
    // `stages` has the rank transport's ranks (std::logic_error otherwise).
    ChunkHub(Transport& rank_transport, ChunkStages stages);
    Transport& rank_transport() { return rank_; }
    const ChunkStages& stages() const { return stages_; }
    int chunks() const { return stages_.chunks(); }
    void start_allgather(int chunk, MessageTag tag, std::vector<double> values, const std::vector<int64_t>& counts);
    std::optional<std::vector<std::vector<double>>> try_take_allgather(int chunk, MessageTag tag);

private:
    struct Gather {
        std::vector<std::vector<double>> mine;  // per chunk, its contribution
        std::vector<int64_t> counts;            // per virtual stage
        int started = 0;
        std::vector<bool> started_by;           // per chunk
        std::optional<std::vector<std::vector<double>>> result;  // per virtual stage, once the rank's has come
        std::vector<bool> taken;
    };
    Transport& rank_;
    const ChunkStages stages_;
    std::map<MessageTag, Gather> gathers_;
};

class ChunkTransport final : public Transport {
public:
    ChunkTransport(ChunkHub& hub, int chunk);

    int stage() const override;
    int num_stages() const override;
    void send(int to, MessageTag tag, const Tensor& tensor) override;
    void post_recv(int from, MessageTag tag, const Shape& shape, DType dtype) override;
    std::optional<Tensor> try_take(int from, MessageTag tag) override;
    void send_values(int to, MessageTag tag, std::vector<double> values) override;
    void post_recv_values(int from, MessageTag tag, size_t max_count) override;
    std::optional<std::vector<double>> try_take_values(int from, MessageTag tag) override;
    void start_allgather(MessageTag tag, std::vector<double> values, const std::vector<int64_t>& counts) override;
    std::optional<std::vector<std::vector<double>>> try_take_allgather(MessageTag tag) override;
    bool wait_for_progress(std::chrono::milliseconds limit) override;
    void finish() override {}
    [[noreturn]] void abort(int exit_code) override;

private:
    // The rank transport's tag of a message from chunk `from_chunk` to chunk `to_chunk`.
    MessageTag rank_tag(MessageTag tag, int from_chunk, int to_chunk) const;
    void check_stage(int stage, const char* what) const;

    ChunkHub& hub_;
    Transport& rank_;
    const ChunkStages& stages_;
    const int chunk_;
};

// The rank's V chunk endpoints over `rank_transport` (index = chunk), sharing `hub`.
std::vector<std::unique_ptr<Transport>> make_chunk_transports(ChunkHub& hub);

}  // namespace nb

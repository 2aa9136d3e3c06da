#include "pipeline/transport/chunk_transport.h"

#include <stdexcept>
#include <utility>

#include <fmt/format.h>

namespace nb {

ChunkStages::ChunkStages(std::vector<std::vector<int>> stage_of) : stage_of_(std::move(stage_of)) {
    if (stage_of_.empty() || stage_of_.front().empty())
        throw std::invalid_argument("ChunkStages: no ranks or no chunks");
    rank_of_.assign(static_cast<size_t>(parts()), -1);
    chunk_of_.assign(static_cast<size_t>(parts()), -1);
    for (int r = 0; r < ranks(); ++r) {
        if (static_cast<int>(stage_of_[static_cast<size_t>(r)].size()) != chunks())
            throw std::invalid_argument(fmt::format("ChunkStages: rank {} has another number of chunks", r));
        for (int c = 0; c < chunks(); ++c) {
            const int s = stage_of_[static_cast<size_t>(r)][static_cast<size_t>(c)];
            if (s < 0 || s >= parts() || rank_of_[static_cast<size_t>(s)] >= 0)
                throw std::invalid_argument(fmt::format("ChunkStages: stage {} (rank {} chunk {}) is out of range or "
                                                        "named twice",
                                                        s, r, c));
            rank_of_[static_cast<size_t>(s)] = r;
            chunk_of_[static_cast<size_t>(s)] = c;
        }
    }
}

int ChunkStages::part(int rank, int chunk) const {
    return stage_of_.at(static_cast<size_t>(rank)).at(static_cast<size_t>(chunk));
}
int ChunkStages::rank_of(int stage) const { return rank_of_.at(static_cast<size_t>(stage)); }
int ChunkStages::chunk_of(int stage) const { return chunk_of_.at(static_cast<size_t>(stage)); }

ChunkHub::ChunkHub(Transport& rank_transport, ChunkStages stages) : rank_(rank_transport), stages_(std::move(stages)) {
    if (stages_.ranks() != rank_.num_stages())
        throw std::logic_error(fmt::format("ChunkHub: chunk stages over {} ranks on a transport of {}", stages_.ranks(),
                                           rank_.num_stages()));
}

void ChunkHub::start_allgather(int chunk, MessageTag tag, std::vector<double> values,
                               const std::vector<int64_t>& counts) {
    const int chunks = stages_.chunks();
    if (counts.size() != static_cast<size_t>(stages_.parts()))
        throw std::logic_error(fmt::format("all-gather {}: counts for {} stages, not {}", describe(tag), counts.size(),
                                           stages_.parts()));
    Gather& g = gathers_[tag];
    if (g.mine.empty()) {
        g.mine.resize(static_cast<size_t>(chunks));
        g.started_by.assign(static_cast<size_t>(chunks), false);
        g.taken.assign(static_cast<size_t>(chunks), false);
        g.counts = counts;
    }
    if (g.counts != counts || g.started_by[static_cast<size_t>(chunk)])
        throw std::logic_error(fmt::format("all-gather {} started twice by chunk {}, or with other counts", describe(tag),
                                           chunk));
    g.started_by[static_cast<size_t>(chunk)] = true;
    g.mine[static_cast<size_t>(chunk)] = std::move(values);
    if (++g.started < chunks) return;
    // Every chunk of the rank is in: one all-gather of the rank's parts, in chunk order.
    std::vector<double> mine;
    std::vector<int64_t> rank_counts(static_cast<size_t>(stages_.ranks()), 0);
    for (int c = 0; c < chunks; ++c) mine.insert(mine.end(), g.mine[c].begin(), g.mine[c].end());
    for (int s = 0; s < stages_.parts(); ++s) rank_counts[static_cast<size_t>(stages_.rank_of(s))] += counts[s];
    rank_.start_allgather(tag, std::move(mine), rank_counts);
}

std::optional<std::vector<std::vector<double>>> ChunkHub::try_take_allgather(int chunk, MessageTag tag) {
    auto it = gathers_.find(tag);
    if (it == gathers_.end()) throw std::logic_error(fmt::format("all-gather {} was not started here", describe(tag)));
    Gather& g = it->second;
    const int chunks = stages_.chunks();
    if (g.started < chunks) return std::nullopt;  // another chunk of this rank has not started it yet
    if (!g.result) {
        std::optional<std::vector<std::vector<double>>> by_rank = rank_.try_take_allgather(tag);
        if (!by_rank) return std::nullopt;
        // Rank q's share holds its chunks' contributions in chunk order: virtual stages part(q, 0), part(q, 1), ...
        std::vector<std::vector<double>> by_stage(static_cast<size_t>(stages_.parts()));
        for (int q = 0; q < stages_.ranks(); ++q) {
            size_t at = 0;
            const std::vector<double>& share = (*by_rank)[static_cast<size_t>(q)];
            for (int c = 0; c < chunks; ++c) {
                const auto stage = static_cast<size_t>(stages_.part(q, c));
                const auto n = static_cast<size_t>(g.counts[stage]);
                by_stage[stage].assign(share.begin() + at, share.begin() + at + n);
                at += n;
            }
        }
        g.result = std::move(by_stage);
    }
    if (g.taken[static_cast<size_t>(chunk)])
        throw std::logic_error(fmt::format("all-gather {} taken twice by chunk {}", describe(tag), chunk));
    g.taken[static_cast<size_t>(chunk)] = true;
    std::vector<std::vector<double>> out = *g.result;
    bool all = true;
    for (bool t : g.taken) all &= t;
    if (all) gathers_.erase(it);
    return out;
}

ChunkTransport::ChunkTransport(ChunkHub& hub, int chunk)
    : hub_(hub), rank_(hub.rank_transport()), stages_(hub.stages()), chunk_(chunk) {}

int ChunkTransport::stage() const { return stages_.part(rank_.stage(), chunk_); }
int ChunkTransport::num_stages() const { return stages_.parts(); }

void ChunkTransport::check_stage(int stage, const char* what) const {
    if (stage < 0 || stage >= num_stages())
        throw std::logic_error(fmt::format("{}: no stage {} of {}", what, stage, num_stages()));
}

MessageTag ChunkTransport::rank_tag(MessageTag tag, int from_chunk, int to_chunk) const {
    const int chunks = stages_.chunks();
    return {tag.channel, (tag.index * chunks + from_chunk) * chunks + to_chunk};
}

void ChunkTransport::send(int to, MessageTag tag, const Tensor& tensor) {
    check_stage(to, "send");
    rank_.send(stages_.rank_of(to), rank_tag(tag, chunk_, stages_.chunk_of(to)), tensor);
}

void ChunkTransport::post_recv(int from, MessageTag tag, const Shape& shape, DType dtype) {
    check_stage(from, "post_recv");
    rank_.post_recv(stages_.rank_of(from), rank_tag(tag, stages_.chunk_of(from), chunk_), shape, dtype);
}

std::optional<Tensor> ChunkTransport::try_take(int from, MessageTag tag) {
    check_stage(from, "try_take");
    return rank_.try_take(stages_.rank_of(from), rank_tag(tag, stages_.chunk_of(from), chunk_));
}

void ChunkTransport::send_values(int to, MessageTag tag, std::vector<double> values) {
    check_stage(to, "send_values");
    rank_.send_values(stages_.rank_of(to), rank_tag(tag, chunk_, stages_.chunk_of(to)), std::move(values));
}

void ChunkTransport::post_recv_values(int from, MessageTag tag, size_t max_count) {
    check_stage(from, "post_recv_values");
    rank_.post_recv_values(stages_.rank_of(from), rank_tag(tag, stages_.chunk_of(from), chunk_), max_count);
}

std::optional<std::vector<double>> ChunkTransport::try_take_values(int from, MessageTag tag) {
    check_stage(from, "try_take_values");
    return rank_.try_take_values(stages_.rank_of(from), rank_tag(tag, stages_.chunk_of(from), chunk_));
}

void ChunkTransport::start_allgather(MessageTag tag, std::vector<double> values, const std::vector<int64_t>& counts) {
    hub_.start_allgather(chunk_, tag, std::move(values), counts);
}

std::optional<std::vector<std::vector<double>>> ChunkTransport::try_take_allgather(MessageTag tag) {
    return hub_.try_take_allgather(chunk_, tag);
}

bool ChunkTransport::wait_for_progress(std::chrono::milliseconds limit) { return rank_.wait_for_progress(limit); }

void ChunkTransport::abort(int exit_code) { rank_.abort(exit_code); }

std::vector<std::unique_ptr<Transport>> make_chunk_transports(ChunkHub& hub) {
    std::vector<std::unique_ptr<Transport>> out;
    for (int c = 0; c < hub.chunks(); ++c) out.push_back(std::make_unique<ChunkTransport>(hub, c));
    return out;
}

}  // namespace nb

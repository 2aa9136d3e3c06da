#include "pipeline/transport/chunk_transport.h"

#include <stdexcept>

#include <fmt/format.h>

namespace nb {

void ChunkHub::start_allgather(int chunk, MessageTag tag, std::vector<double> values,
                               const std::vector<int64_t>& counts) {
    const int ranks = rank_.num_stages();
    if (counts.size() != static_cast<size_t>(ranks * chunks_))
        throw std::logic_error(fmt::format("all-gather {}: counts for {} stages, not {}", describe(tag), counts.size(),
                                           ranks * chunks_));
    Gather& g = gathers_[tag];
    if (g.mine.empty()) {
        g.mine.resize(static_cast<size_t>(chunks_));
        g.started_by.assign(static_cast<size_t>(chunks_), false);
        g.taken.assign(static_cast<size_t>(chunks_), false);
        g.counts = counts;
    }
    if (g.counts != counts || g.started_by[static_cast<size_t>(chunk)])
        throw std::logic_error(fmt::format("all-gather {} started twice by chunk {}, or with other counts", describe(tag),
                                           chunk));
    g.started_by[static_cast<size_t>(chunk)] = true;
    g.mine[static_cast<size_t>(chunk)] = std::move(values);
    if (++g.started < chunks_) return;
    // Every chunk of the rank is in: one all-gather of the rank's parts, in chunk order.
    std::vector<double> mine;
    std::vector<int64_t> rank_counts(static_cast<size_t>(ranks), 0);
    for (int c = 0; c < chunks_; ++c) mine.insert(mine.end(), g.mine[c].begin(), g.mine[c].end());
    for (int s = 0; s < ranks * chunks_; ++s) rank_counts[static_cast<size_t>(s % ranks)] += counts[s];
    rank_.start_allgather(tag, std::move(mine), rank_counts);
}

std::optional<std::vector<std::vector<double>>> ChunkHub::try_take_allgather(int chunk, MessageTag tag) {
    auto it = gathers_.find(tag);
    if (it == gathers_.end()) throw std::logic_error(fmt::format("all-gather {} was not started here", describe(tag)));
    Gather& g = it->second;
    if (g.started < chunks_) return std::nullopt;  // another chunk of this rank has not started it yet
    if (!g.result) {
        std::optional<std::vector<std::vector<double>>> by_rank = rank_.try_take_allgather(tag);
        if (!by_rank) return std::nullopt;
        // Rank q's part holds its chunks' contributions in chunk order: virtual stages q, P + q, 2P + q, ...
        const int ranks = rank_.num_stages();
        std::vector<std::vector<double>> by_stage(static_cast<size_t>(ranks * chunks_));
        for (int q = 0; q < ranks; ++q) {
            size_t at = 0;
            const std::vector<double>& part = (*by_rank)[static_cast<size_t>(q)];
            for (int c = 0; c < chunks_; ++c) {
                const auto n = static_cast<size_t>(g.counts[static_cast<size_t>(c * ranks + q)]);
                by_stage[static_cast<size_t>(c * ranks + q)].assign(part.begin() + at, part.begin() + at + n);
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
    : hub_(hub), rank_(hub.rank_transport()), chunk_(chunk), ranks_(rank_.num_stages()), chunks_(hub.chunks()) {}

int ChunkTransport::stage() const { return chunk_ * ranks_ + rank_.stage(); }
int ChunkTransport::num_stages() const { return ranks_ * chunks_; }

void ChunkTransport::check_stage(int stage, const char* what) const {
    if (stage < 0 || stage >= num_stages())
        throw std::logic_error(fmt::format("{}: no stage {} of {}", what, stage, num_stages()));
}

MessageTag ChunkTransport::rank_tag(MessageTag tag, int from_chunk, int to_chunk) const {
    return {tag.channel, (tag.index * chunks_ + from_chunk) * chunks_ + to_chunk};
}

void ChunkTransport::send(int to, MessageTag tag, const Tensor& tensor) {
    check_stage(to, "send");
    rank_.send(rank_of(to), rank_tag(tag, chunk_, to / ranks_), tensor);
}

void ChunkTransport::post_recv(int from, MessageTag tag, const Shape& shape, DType dtype) {
    check_stage(from, "post_recv");
    rank_.post_recv(rank_of(from), rank_tag(tag, from / ranks_, chunk_), shape, dtype);
}

std::optional<Tensor> ChunkTransport::try_take(int from, MessageTag tag) {
    check_stage(from, "try_take");
    return rank_.try_take(rank_of(from), rank_tag(tag, from / ranks_, chunk_));
}

void ChunkTransport::send_values(int to, MessageTag tag, std::vector<double> values) {
    check_stage(to, "send_values");
    rank_.send_values(rank_of(to), rank_tag(tag, chunk_, to / ranks_), std::move(values));
}

void ChunkTransport::post_recv_values(int from, MessageTag tag, size_t max_count) {
    check_stage(from, "post_recv_values");
    rank_.post_recv_values(rank_of(from), rank_tag(tag, from / ranks_, chunk_), max_count);
}

std::optional<std::vector<double>> ChunkTransport::try_take_values(int from, MessageTag tag) {
    check_stage(from, "try_take_values");
    return rank_.try_take_values(rank_of(from), rank_tag(tag, from / ranks_, chunk_));
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

// ChunkTransport (pipeline/transport/chunk_transport.h) over an in-process network of P "ranks", V chunks each,
// placed as a loop (interleaved 1F1B) and as a V (zb-v, where two parts of one rank talk to each other):
// messages between any two virtual stages arrive at the right one only, whichever chunks share the ranks; an
// all-gather started by every chunk of every rank returns each virtual stage's contribution at its own index;
// misuse is a logic_error.
#include <doctest/doctest.h>

#include <memory>
#include <stdexcept>
#include <vector>

#include "pipeline/transport/chunk_transport.h"
#include "pipeline/transport/in_process_transport.h"
#include "src/plan/stage_placement.h"

using namespace nb;

namespace {

struct Ranks {
    InProcessNetwork network;
    std::vector<std::unique_ptr<ChunkHub>> hubs;
    std::vector<std::vector<std::unique_ptr<Transport>>> chunks;  // [rank][chunk]
    StagePlacement placement;
    explicit Ranks(const StagePlacement& placed) : network(placed.ranks), placement(placed) {
        for (int r = 0; r < placed.ranks; ++r) {
            hubs.push_back(std::make_unique<ChunkHub>(network.endpoint(r), ChunkStages(placed.table())));
            chunks.push_back(make_chunk_transports(*hubs.back()));
        }
    }
    Transport& stage(int s) {
        return *chunks[static_cast<size_t>(placement.rank_of(s))][static_cast<size_t>(placement.chunk_of(s))];
    }
};

// The placements each case runs over: P x V as a loop, and P x 2 as a V.
std::vector<StagePlacement> placements(int p, int v) {
    return {{p, v, PlacementShape::loop}, {p, 2, PlacementShape::v}};
}

Tensor value_tensor(float v) {
    Tensor t = Tensor::zeros({2});
    t.f32()[0] = v;
    t.f32()[1] = -v;
    return t;
}

}  // namespace

TEST_CASE("chunk transport: every virtual stage sends to every other; each message reaches its stage only") {
    for (const StagePlacement& placement : placements(3, 2)) {
        CAPTURE(static_cast<int>(placement.shape));
        const int n = placement.parts();
        Ranks ranks(placement);
        for (int s = 0; s < n; ++s) {
            CHECK(ranks.stage(s).stage() == s);
            CHECK(ranks.stage(s).num_stages() == n);
        }
        const MessageTag tag{Channel::activation, 7};
        for (int to = 0; to < n; ++to)
            for (int from = 0; from < n; ++from) ranks.stage(to).post_recv(from, tag, {2}, DType::f32);
        for (int from = 0; from < n; ++from)
            for (int to = 0; to < n; ++to) ranks.stage(from).send(to, tag, value_tensor(static_cast<float>(from * 10 + to)));
        for (int to = 0; to < n; ++to)
            for (int from = 0; from < n; ++from) {
                CAPTURE(from);
                CAPTURE(to);
                const std::optional<Tensor> got = ranks.stage(to).try_take(from, tag);
                REQUIRE(got);
                CHECK(got->f32()[0] == static_cast<float>(from * 10 + to));
            }
        // Values too, and a receive that nothing was sent for stays empty.
        ranks.stage(4).post_recv_values(1, {Channel::report, 2}, 3);
        ranks.stage(3).post_recv_values(1, {Channel::report, 2}, 3);
        ranks.stage(1).send_values(4, {Channel::report, 2}, {1.0, 2.0});
        CHECK(ranks.stage(4).try_take_values(1, {Channel::report, 2}) == std::vector<double>{1.0, 2.0});
        CHECK_FALSE(ranks.stage(3).try_take_values(1, {Channel::report, 2}));
        CHECK_THROWS_AS(ranks.stage(0).send(n, tag, value_tensor(1)), std::logic_error);
    }
}

TEST_CASE("chunk transport: an all-gather waits for every chunk of the rank, then gives every stage's part") {
    for (const StagePlacement& placement : placements(2, 3)) {
        CAPTURE(static_cast<int>(placement.shape));
        const int n = placement.parts();
        Ranks ranks(placement);
        std::vector<int64_t> counts;
        for (int s = 0; s < n; ++s) counts.push_back(s % 3);  // 0, 1 or 2 values: some stages give none
        const MessageTag tag{Channel::clip_sums, 5};
        auto contribution = [](int s) { return std::vector<double>(static_cast<size_t>(s % 3), 100.0 + s); };
        // Every stage but the last starts: nobody has a result yet.
        for (int s = 0; s < n - 1; ++s) ranks.stage(s).start_allgather(tag, contribution(s), counts);
        for (int s = 0; s < n - 1; ++s) CHECK_FALSE(ranks.stage(s).try_take_allgather(tag));
        CHECK_THROWS_AS(ranks.stage(0).start_allgather(tag, contribution(0), counts), std::logic_error);
        ranks.stage(n - 1).start_allgather(tag, contribution(n - 1), counts);
        for (int s = 0; s < n; ++s) {
            CAPTURE(s);
            const auto got = ranks.stage(s).try_take_allgather(tag);
            REQUIRE(got);
            REQUIRE(got->size() == static_cast<size_t>(n));
            for (int t = 0; t < n; ++t) CHECK((*got)[static_cast<size_t>(t)] == contribution(t));
        }
        CHECK_THROWS_AS(ranks.stage(0).try_take_allgather(tag), std::logic_error);  // taken by all: forgotten
    }
}

TEST_CASE("chunk transport: a hub refuses a table over another number of ranks, a table that names a stage twice") {
    InProcessNetwork network(2);
    CHECK_THROWS_AS(ChunkHub(network.endpoint(0), ChunkStages(StagePlacement{3, 2, PlacementShape::v}.table())),
                    std::logic_error);
    CHECK_THROWS_AS(ChunkStages({{0, 1}, {1, 2}}), std::invalid_argument);  // stage 1 twice, stage 3 never
    CHECK_THROWS_AS(ChunkStages({{0, 1}, {2}}), std::invalid_argument);     // ranks with other chunk counts
}

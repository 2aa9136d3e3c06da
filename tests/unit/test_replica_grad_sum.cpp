// ReplicaGradSum (pipeline/stage/replica_grad_sum.h) over an in-process network of D replicas: every replica ends
// with ((0 + g_0) + g_1) + ... + g_{D-1}, element by element in float, whatever the bucket and shard boundaries
// (a slot larger than a bucket, shards of unequal and of zero length); two stages' sums in flight at once do not
// mix; started bucket by bucket as a backward finishes its slots (from the end), the same bits; what it waits for
// names the bucket and the replica; misuse is a logic_error.
#include <doctest/doctest.h>

#include <cstring>
#include <random>
#include <stdexcept>
#include <vector>

#include "model/params.h"
#include "pipeline/stage/replica_grad_sum.h"
#include "pipeline/transport/in_process_transport.h"

using namespace nb;

namespace {

// Slots of every kind of size: tiny ones (fewer elements than replicas), odd ones, one over a bucket.
const std::vector<Shape> kShapes = {{1}, {2}, {3, 5}, {7}, {ReplicaGradSum::kBucketBytes / 4 + 13}, {1}, {64, 3}};

// Replica r's gradient: values of many magnitudes, so that the order of the additions shows in the bits.
TensorSet replica_grads(int replica, int stage) {
    std::mt19937 rng(static_cast<unsigned>(1000 * stage + replica));
    std::uniform_real_distribution<float> mantissa(-1, 1);
    std::uniform_int_distribution<int> exponent(-12, 12);
    TensorSet set;
    for (const Shape& shape : kShapes) {
        Tensor t = Tensor::empty(shape);
        for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = std::ldexp(mantissa(rng), exponent(rng));
        set.tensors.push_back(std::move(t));
    }
    return set;
}

// The oracle's order: from 0, replica 0's, then 1's, ... (optim/replica_grads.h).
std::vector<float> in_order(const std::vector<TensorSet>& grads, int slot, const std::vector<int>& order) {
    std::vector<float> sum(static_cast<size_t>(grads[0][slot].numel()), 0.0f);
    for (int r : order)
        for (size_t i = 0; i < sum.size(); ++i) sum[i] += grads[static_cast<size_t>(r)][slot].f32()[i];
    return sum;
}

bool equal_bits(const Tensor& t, const std::vector<float>& v) {
    return static_cast<size_t>(t.numel()) == v.size() && std::memcmp(t.f32(), v.data(), t.bytes()) == 0;
}

// Runs every sum to the end, round-robin (bounded: a sum that never completes fails the test).
void drive(std::vector<ReplicaGradSum>& sums) {
    std::vector<bool> done(sums.size(), false);
    for (int round = 0; round < 100; ++round) {
        bool all = true;
        for (size_t i = 0; i < sums.size(); ++i) {
            if (!done[i]) done[i] = sums[i].try_finish();
            all &= done[i];
        }
        if (all) return;
    }
    FAIL("a replica sum did not complete");
}

}  // namespace

TEST_CASE("replica sum: every replica ends with the sum in replica order, bit for bit") {
    for (int replicas : {2, 3}) {
        CAPTURE(replicas);
        InProcessNetwork net(replicas);
        std::vector<TensorSet> original, grads;
        for (int r = 0; r < replicas; ++r) {
            original.push_back(replica_grads(r, 0));
            grads.push_back(replica_grads(r, 0));
        }
        std::vector<ReplicaGradSum> sums;
        for (int r = 0; r < replicas; ++r) sums.emplace_back(net.endpoint(r), 0, 1, 16);
        for (int r = 0; r < replicas; ++r) sums[static_cast<size_t>(r)].start(4, grads[static_cast<size_t>(r)].tensors);
        CHECK(sums[0].in_flight());
        drive(sums);
        std::vector<int> order(static_cast<size_t>(replicas));
        for (int r = 0; r < replicas; ++r) order[static_cast<size_t>(r)] = r;
        std::vector<int> reversed(order.rbegin(), order.rend());
        bool order_shows = false;
        for (int slot = 0; slot < static_cast<int>(kShapes.size()); ++slot) {
            const std::vector<float> expected = in_order(original, slot, order);
            for (int r = 0; r < replicas; ++r) CHECK(equal_bits(grads[static_cast<size_t>(r)][slot], expected));
            order_shows |= !equal_bits(grads[0][slot], in_order(original, slot, reversed));
        }
        // With 3 replicas another order gives other bits somewhere: the test can tell.
        if (replicas == 3) CHECK(order_shows);
        CHECK_FALSE(sums[0].in_flight());
    }
}

TEST_CASE("replica sum: two stages' sums in flight on one replica transport stay apart") {
    InProcessNetwork net(2);
    std::vector<TensorSet> original, grads;
    for (int stage = 0; stage < 2; ++stage)
        for (int r = 0; r < 2; ++r) {
            original.push_back(replica_grads(r, stage));
            grads.push_back(replica_grads(r, stage));
        }
    std::vector<ReplicaGradSum> sums;  // index stage x 2 + replica: two chunks of each rank
    for (int stage = 0; stage < 2; ++stage)
        for (int r = 0; r < 2; ++r) sums.emplace_back(net.endpoint(r), stage, 2, 16);
    for (size_t i = 0; i < sums.size(); ++i) sums[i].start(0, grads[i].tensors);
    drive(sums);
    for (int stage = 0; stage < 2; ++stage) {
        const std::vector<TensorSet> of_stage = {original[static_cast<size_t>(2 * stage)],
                                                 original[static_cast<size_t>(2 * stage + 1)]};
        for (int slot = 0; slot < static_cast<int>(kShapes.size()); ++slot)
            for (int r = 0; r < 2; ++r)
                CHECK(equal_bits(grads[static_cast<size_t>(2 * stage + r)][slot], in_order(of_stage, slot, {0, 1})));
    }
}

TEST_CASE("replica sum: buckets started as the backward finishes their slots give the same bits") {
    InProcessNetwork net(2);
    std::vector<TensorSet> original = {replica_grads(0, 0), replica_grads(1, 0)};
    std::vector<TensorSet> grads = {replica_grads(0, 0), replica_grads(1, 0)};
    std::vector<ReplicaGradSum> sums;
    for (int r = 0; r < 2; ++r) sums.emplace_back(net.endpoint(r), 0, 1, 16);
    for (int r = 0; r < 2; ++r) sums[static_cast<size_t>(r)].begin(2, grads[static_cast<size_t>(r)].tensors);
    // Slots 0-3 are bucket 0, slot 4 (over 4 MiB) bucket 1, slots 5-6 bucket 2. Replica 0 finishes slots from
    // the end one at a time, replica 1 in two strides; neither has started bucket 0 yet.
    const int n = static_cast<int>(kShapes.size());
    for (int first = n - 1; first >= 1; --first) sums[0].slots_done_from(first);
    sums[1].slots_done_from(5);
    sums[1].slots_done_from(2);
    CHECK(sums[0].waits_for() == "the replica sum of step 2: 1 bucket(s) wait for the backward");
    CHECK_THROWS_AS(sums[0].try_finish(), std::logic_error);  // bucket 0 has not started
    // A slot of bucket 0 that changes before it is done is in the sum: packing waits for the slot.
    for (int r = 0; r < 2; ++r) {
        grads[static_cast<size_t>(r)][0].f32()[0] += 1.0f;
        original[static_cast<size_t>(r)][0].f32()[0] += 1.0f;
    }
    for (auto& s : sums) s.slots_done_from(0);
    drive(sums);
    for (int slot = 0; slot < n; ++slot)
        for (int r = 0; r < 2; ++r) CHECK(equal_bits(grads[static_cast<size_t>(r)][slot], in_order(original, slot, {0, 1})));
}

TEST_CASE("replica sum: it names what it waits for, and refuses misuse") {
    InProcessNetwork net(2);
    TensorSet a = replica_grads(0, 0), b = replica_grads(1, 0);
    ReplicaGradSum s0(net.endpoint(0), 0, 1, 16), s1(net.endpoint(1), 0, 1, 16);
    CHECK_THROWS_AS(s0.try_finish(), std::logic_error);  // nothing started
    CHECK_THROWS_AS(s0.slots_done_from(0), std::logic_error);  // nor begun
    s0.start(3, a.tensors);
    CHECK_THROWS_AS(s0.start(4, a.tensors), std::logic_error);  // one at a time
    CHECK_FALSE(s0.try_finish());                       // replica 1 has sent nothing
    CHECK(s0.waits_for() == "the replica sum of step 3: bucket 0 of 3's shards from replica 1");
    s1.start(3, b.tensors);
    std::vector<ReplicaGradSum> both;
    both.push_back(std::move(s0));
    both.push_back(std::move(s1));
    drive(both);
    CHECK(both[0].waits_for() == "no replica sum");
}

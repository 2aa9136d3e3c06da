// ShardExchange: the distributed optimizer's messages between one stage's D replicas (--use-distributed-optimizer;
// the split: optim/optimizer_shards.h, rows of tensors, each shard owned by one replica).
//
//   weights   after each update, every replica sends the rows it owns (just updated) to every other replica and
//             takes theirs: the weights are whole again on every replica, with the bits the owners computed,
//             which are the unsharded update's (a shard's update reads only its own rows of gradient, state and
//             weights, and the norm it is clipped by comes from the whole summed gradient).
//   state     a checkpoint and the run's end need the whole optimizer state in its canonical order (the order,
//             names and shapes of an unsharded stage's, so that files and hashes do not depend on D or on
//             sharding): the other replicas send their shards' state to replica 0, which puts the rows together.
//
// Every message has its own tag: (replica_weights, (step x stages + stage) x stride + shard) and (replica_state,
// (key x stages + stage) x stride + position in the canonical state; one message per owner, told apart by source),
// stride at least the most shards or state tensors of any stage: dense, so that few MPI tags wrap late.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "model/params.h"
#include "optim/optimizer_shards.h"
#include "pipeline/transport/transport.h"

namespace nb {

class ShardExchange {
public:
    // `replicas`: the stage's replica transport (its stage() = this replica); `shards`: every replica's shards of
    // `layout` (optimizer_shards); `state`: the unsharded stage's state names and shapes, in canonical order;
    // `tag_stride`: the same on every rank (above).
    ShardExchange(Transport& replicas, int stage, int num_stages, const ParamLayout& layout,
                  std::vector<TensorShard> shards, std::vector<std::pair<std::string, Shape>> state,
                  int64_t tag_stride);

    // After the update of `step`: the owned rows of `master` to every other replica, the others' receives posted.
    void start_weights(int64_t step, const TensorSet& master);
    // True once every other owner's rows have come into `master` (then the exchange of `step` is over).
    bool try_take_weights(TensorSet& master);

    // Gather `key` (a checkpoint step, or past the last one for the end of the run), replica r > 0: its own state
    // tensors (StageOptimizer::state_tensors) to replica 0.
    void send_state(int64_t key, const std::vector<std::pair<std::string, Tensor*>>& mine);
    // ... replica 0: once every other replica's have come, the whole state in canonical order (its own from
    // `mine`); nullopt until then. The tensors stay valid until the next gather begins.
    std::optional<std::vector<std::pair<std::string, const Tensor*>>> try_gather_state(
        int64_t key, const std::vector<std::pair<std::string, Tensor*>>& mine);

    std::string waits_for() const;  // for the watchdog

private:
    MessageTag weights_tag(int64_t step, size_t shard) const;
    MessageTag state_tag(int64_t key, size_t position) const;
    int param_of_state(const std::string& name) const;
    Tensor shard_rows(const Tensor& t, const TensorShard& s) const;

    Transport& replicas_;
    const int replica_, stage_, num_stages_;
    const int64_t tag_stride_;
    const ParamLayout& layout_;
    std::vector<TensorShard> shards_;
    std::vector<std::pair<std::string, Shape>> state_;
    std::vector<int> state_params_;  // per canonical state tensor, its parameter
    // The exchange in flight: the weights of step `step_`, or the state of gather `key_`.
    std::optional<int64_t> step_, key_;
    std::map<size_t, std::optional<Tensor>> weights_in_;  // by shard, from its owner
    std::map<size_t, std::optional<Tensor>> state_in_;    // by shard, from its owner
    std::vector<Tensor> assembled_;                       // the gathered state, whole
};

}  // namespace nb

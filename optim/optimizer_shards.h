// The distributed optimizer's split of a stage's optimizer state (--use-distributed-optimizer, Megatron's name;
// ZeRO-1): each of the stage's D replicas keeps and updates the state of its shards; every replica still holds the
// whole weights, weight versions and summed gradient, and after its update sends the weights of its shards to the
// others. For f32 weights and gradients and AdamW that is Megatron's 16 -> 8 + 8/D bytes per parameter.
//
// How the state is split (a shard = rows [row_begin, row_end) of one tensor, owned by one replica):
//   elementwise state (adamw, lion, adan; muon's   in layout order, replica 0 takes rows until it holds 1/D of
//   AdamW part: embedding, head, norms)            those bytes, then replica 1, ... (Megatron's flat even split,
//                                                  cut at row boundaries): a tensor may fall to several replicas,
//                                                  and the update of a row range is the rows of the whole update
//   whole tensors (muon's hidden matrices and      one owner each: Newton-Schulz, SOAP's eigenbases and MARS's
//   soap's matrices: Newton-Schulz, eigenbases;    norm of c_t need the whole gradient. Largest state first onto
//   mars: the norm of c_t; the MoE expert bias)    the replica owning the fewest bytes so far (the lowest on a tie)
// Either way a shard's update reads only its own rows of gradient, state and weights, clipped by the norm of the
// whole summed gradient, so the bits are the unsharded run's.
#pragma once

#include <cstdint>
#include <vector>

#include "model/params.h"
#include "optim/delay_fix.h"
#include "optim/optimizer_config.h"

namespace nb {

struct TensorShard {
    int tensor = 0;  // layout index
    int64_t row_begin = 0, row_end = 0;
    int owner = 0;
    bool operator==(const TensorShard&) const = default;
};

// Whether `optimizer`'s state of `info` may be cut by rows (elementwise state).
bool shards_by_rows(const OptimizerConfig& optimizer, const ParamInfo& info);

// Every shard of `layout`'s tensors: each tensor's rows covered once, in layout order, then row order.
std::vector<TensorShard> optimizer_shards(const OptimizerConfig& optimizer, const DelayFixConfig& delay_fix,
                                          const ParamLayout& layout, int replicas);

// Those `replica` owns (at most one per tensor), in layout order.
std::vector<TensorShard> owned_shards(const std::vector<TensorShard>& shards, int replica);

// Per replica r in [0, replicas), the bytes of the stage's optimizer and delay-fix state it owns.
std::vector<int64_t> optimizer_shard_bytes(const OptimizerConfig& optimizer, const DelayFixConfig& delay_fix,
                                           const ParamLayout& layout, int replicas);

}  // namespace nb

// The distributed optimizer's split of a stage's optimizer state (--use-distributed-optimizer, Megatron's name;
// ZeRO-1): each of the stage's D replicas keeps and updates the state of the tensors it owns; every replica still
// holds the whole weights, weight versions and summed gradient, and after its update sends the weights it owns to
// the others. For f32 weights and gradients and AdamW that is Megatron's 16 -> 8 + 8/D bytes per parameter
// (up to the balance of whole tensors).
//
// Every tensor is owned whole, by one replica: Muon's Newton-Schulz and SOAP's eigenbases need a matrix's whole
// gradient, and a whole tensor's update, its sum of squares and its checkpoint name are then exactly the unsharded
// run's (Megatron's flat even split would cut elementwise state finer; here the spread between replicas is at
// most the largest tensor's state). Owners are chosen largest state first, each onto the replica owning the fewest
// bytes so far (the lowest-numbered on a tie): LPT, balancing the state's bytes (Muon's Newton-Schulz time grows
// with a matrix's size too, so the bytes stand in for its cost). A buffer (the MoE expert bias: no optimizer state)
// is owned too: its owner updates it and sends it with the weights.
#pragma once

#include <cstdint>
#include <vector>

#include "model/params.h"
#include "optim/delay_fix.h"
#include "optim/optimizer_config.h"

namespace nb {

// Per tensor of `layout` (layout order), the replica in [0, replicas) that owns it.
std::vector<int> optimizer_tensor_owners(const OptimizerConfig& optimizer, const DelayFixConfig& delay_fix,
                                         const ParamLayout& layout, int replicas);

// The layout indices `replica` owns, in layout order.
std::vector<int> owned_tensors(const std::vector<int>& owners, int replica);

// Per replica r in [0, replicas), the bytes of the stage's optimizer and delay-fix state it owns.
std::vector<int64_t> optimizer_shard_bytes(const OptimizerConfig& optimizer, const DelayFixConfig& delay_fix,
                                           const ParamLayout& layout, int replicas);

}  // namespace nb

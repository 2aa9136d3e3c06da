// The distributed optimizer's split of a stage's optimizer state (--use-distributed-optimizer, Megatron's name;
// ZeRO-1): each of the stage's D replicas keeps and updates 1/D of it, the gradients reduce-scattered to their
// owners and the updated weights all-gathered back. Weights, weight versions and gradients stay whole on every
// replica; for f32 weights and gradients and AdamW that is Megatron's 16 -> 8 + 8/D bytes per parameter.
//
// How the state is split:
//   elementwise state (adamw, lion, adan, mars; muon's  the elements in D even ranges (Megatron's flat buffer): a
//   AdamW part: embedding, head, norms)                replica owns 1/D of those bytes, rounded up
//   muon's hidden matrices, soap's matrices            whole tensors: Newton-Schulz and the eigenbases need a
//                                                      matrix's whole gradient. Each goes to one owner, largest
//                                                      state first, to the replica owning the fewest bytes so
//                                                      far (the lowest-numbered on a tie), after the even part
// Only `nobubble info` uses it so far (the memory table of a P x D run); the executor across replicas is not built.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "model/params.h"
#include "optim/delay_fix.h"
#include "optim/optimizer_config.h"

namespace nb {

// Whether `optimizer` keeps parameter `info`'s state whole on one replica (muon's hidden matrices, soap's matrices).
bool shards_whole_tensor(std::string_view optimizer, const ParamInfo& info);

// Per replica r in [0, replicas), the bytes of the stage's optimizer and delay-fix state it owns.
std::vector<int64_t> optimizer_shard_bytes(const OptimizerConfig& optimizer, const DelayFixConfig& delay_fix,
                                           const ParamLayout& layout, int replicas);

}  // namespace nb

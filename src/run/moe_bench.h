// Timing one MoE feed-forward (model/moe_layer.h) against a dense SwiGLU MLP of the same active FLOPs, for
// `nobubble bench moe`: forward + backward of each through the real ops on one backend, from the same random
// input and output gradient, the two alternating repetition by repetition (so that both see the same load on a
// shared machine), the best of the repetitions each.
//
// The dense MLP's inner size is k f + f_shared: its three matrices per token match the k routed experts' and the
// shared expert's. The MoE layer also runs its router (E x d per token, in its FLOPs below), the top-k, the
// permutation, the combine and the aux loss: what the ratio dense / MoE measures is what those and the grouped
// GEMMs over small per-expert row blocks cost beyond one dense GEMM per projection.
#pragma once

#include <cstdint>

#include "model/moe_config.h"
#include "src/ops/ops.h"

namespace nb {

struct MoeLayerShape {
    int64_t tokens = 2048;  // rows N (a microbatch's batch x seq)
    int64_t hidden = 512;   // d
    MoeConfig moe;
    int64_t dense_ffn_hidden_size() const { return moe.topk * moe.ffn_hidden_size + moe.shared_ffn_hidden_size; }
};

struct MoeLayerTiming {
    double moe_s = 0, dense_s = 0;          // forward + backward, best of the repetitions
    double moe_flops = 0, dense_flops = 0;  // forward + backward matmul FLOPs (model/flops.h's convention)
    double busiest_expert_load = 0;         // (token, slot) pairs of the busiest expert / the mean (1 = balanced)
};

// `reps` >= 1 timed repetitions of each after one untimed warm-up of each. The weights are N(0, 0.02), the input
// and output gradient N(0, 1), all from fixed seeds.
MoeLayerTiming time_moe_layer(Ops& ops, const MoeLayerShape& shape, int reps);

// One more forward + backward of each with every op timed (src/ops/op_profiler.h), printed as two tables.
void print_moe_layer_profile(Ops& ops, const MoeLayerShape& shape);

}  // namespace nb

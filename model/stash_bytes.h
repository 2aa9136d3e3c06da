// What one microbatch's stashes hold on a stage, planned from the shapes alone: the figures the memory check,
// `nobubble info` and `bench recompute` count, equal to what the layers' stashes measure (Stash::bytes, f32;
// tests/unit/test_stash_bytes.cpp runs the layers and compares).
//
// A microbatch's stash goes through up to four states on a stage, and a schedule's activation peak is the most
// of their sum over its microbatches at once (pipeline/schedule/schedule.h peak_stash_bytes):
//   kept             from its forward until its backward begins: what the granularity keeps (model/recompute.h)
//   backward_peak    the most during a fused backward: a recomputed group's rerun makes the group's full stash
//                    again on top of the earlier groups' inputs (the layers already done hold nothing)
//   input_half_peak  the same during B of a split backward, where each done layer keeps what its W reads
//   weight_half      from B until W (zero-bubble schedules): the tensors W's products read, the forward's and
//                    the activation gradients B made; the same whatever the granularity
// In rows (tokens) of the microbatch, N = B T, with d hidden, f ffn, kv = the key/value width, H heads, V vocab
// (a float or an i32 is 4 bytes):
//   dense block   keeps x, h1, q, attn, x1, h2 (6 d), k, v (2 kv), gate, up, act (3 f), lse (H), two 1/rms (2);
//                 selective drops h1, h2, act (2 d + f); W reads x, h1, attn, x1, h2, the block's dout and the
//                 gradients of x1, h1, h2, q (10 d), of k, v (2 kv), act, gate, up (3 f), the two 1/rms
//   MoE block     the attention half's, the MoE's h, probs, top-k, permutation, offsets, per pair xp, expert
//                 output and SwiGLU, the shared expert's SwiGLU (model/moe_layer.h MoeSaved); selective drops h1
//                 and the attention half's h2 (the MoE keeps h2 as its h)
//   head          keeps x, h (2 d), logits (V), 1/rms and lse (2); under full, x, 1/rms and lse only (it reruns
//                 the norm and the logits' GEMM); W reads x, h and their gradients (3 d), dlogits (V), 1/rms
//   embedding     keeps nothing; W reads the tokens and its dout (d + 1)
//   a recomputed group's first block keeps its input (d), the group's other blocks nothing.
#pragma once

#include <cstdint>

#include "model/config.h"
#include "model/recompute.h"
#include "model/stage_model.h"

namespace nb {

struct MicrobatchStashBytes {
    int64_t kept = 0;
    int64_t backward_peak = 0;
    int64_t input_half_peak = 0;
    int64_t weight_half = 0;
};

// Stage `spec`'s figures for one microbatch of batch_size x seq_len tokens under `recompute`, in f32 bytes.
MicrobatchStashBytes microbatch_stash_bytes(const ModelConfig& config, const StageSpec& spec, int64_t batch_size,
                                            int64_t seq_len, const RecomputeConfig& recompute = {});

}  // namespace nb

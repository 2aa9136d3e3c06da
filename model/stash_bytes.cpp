#include "model/stash_bytes.h"

#include <algorithm>
#include <vector>

namespace nb {

namespace {

// One layer's figures for one microbatch, in floats (4 bytes each: f32 or i32); the formulas of the header.
struct LayerStashFloats {
    int64_t kept = 0;         // what its forward keeps when it is not recomputed
    int64_t rerun = 0;        // what its forward keeps when its group is rerun (everything)
    int64_t weight_half = 0;  // what its W reads
};

LayerStashFloats block_floats(const ModelConfig& c, int64_t block, int64_t rows, RecomputeGranularity granularity) {
    const int64_t d = c.hidden_size, f = c.ffn_hidden_size, kv = c.kv_dim(), H = c.num_heads;
    const bool selective = granularity == RecomputeGranularity::selective;
    // The attention half (x, h1, q, attn, x1, h2, k, v, lse, two 1/rms) and its W (x, h1, attn, x1 and the
    // gradients of x1, h1, h2, q; k, v; the two 1/rms).
    const int64_t attention = rows * (6 * d + 2 * kv + H + 2);
    const int64_t attention_weight_half = rows * (8 * d + 2 * kv + 2);
    if (!c.is_moe_block(block)) {
        const int64_t all = attention + rows * 3 * f;
        // W also reads h2 (the MLP's input), the block's dout and act, gate, up's gradients.
        return {selective ? all - rows * (2 * d + f) : all, all, attention_weight_half + rows * (2 * d + 3 * f)};
    }
    const MoeConfig& m = c.moe;
    const int64_t E = m.num_experts, k = m.topk, pairs = rows * k, fe = m.ffn_hidden_size;
    const int64_t fs = m.shared_ffn_hidden_size;
    // MoeSaved: h, probs, top-k expert and gate, the permutation both ways, offsets, per pair xp and the expert
    // output, gate, up, act; the shared expert's gate, up, act. (The block's h2 and the MoE's h are one tensor,
    // kept under both names and counted twice, as Stash::bytes counts it.)
    const int64_t moe = rows * (d + E + 4 * k) + (E + 1) + pairs * (2 * d + 3 * fe) + rows * 3 * fs;
    const int64_t all = attention + moe;
    // W: h, the router's dlogits, per pair xp, act, the expert output's and gate, up's gradients, the offsets;
    // the shared expert's act, gate and up gradients and the block's dout.
    const int64_t moe_weight_half = rows * (d + E) + pairs * (2 * d + 3 * fe) + (E + 1) +
                                    (m.has_shared_expert() ? rows * (d + 3 * fs) : 0);
    return {selective ? all - rows * 2 * d : all, all, attention_weight_half + moe_weight_half};
}

LayerStashFloats head_floats(const ModelConfig& c, int64_t rows, RecomputeGranularity granularity) {
    const int64_t d = c.hidden_size, V = c.vocab_size;
    const int64_t all = rows * (2 * d + V + 2);
    return {granularity == RecomputeGranularity::full ? rows * (d + 2) : all, all, rows * (3 * d + V + 1)};
}

}  // namespace

MicrobatchStashBytes microbatch_stash_bytes(const ModelConfig& config, const StageSpec& spec, int64_t batch_size,
                                            int64_t seq_len, const RecomputeConfig& recompute) {
    const int64_t rows = batch_size * seq_len;
    std::vector<LayerStashFloats> layers;
    if (spec.has_embedding) layers.push_back({0, 0, rows * (config.hidden_size + 1)});
    for (int64_t b = spec.first_block; b < spec.end_block; ++b)
        layers.push_back(block_floats(config, b, rows, recompute.granularity));
    if (spec.has_head) layers.push_back(head_floats(config, rows, recompute.granularity));
    const std::vector<int64_t> group = recompute_groups(spec, recompute);
    const auto n = static_cast<int64_t>(layers.size());
    auto in_group = [&](int64_t i) { return group[static_cast<size_t>(i)] >= 0; };
    // What layer i keeps from its forward: its stash, or in a recomputed group, the group's input or nothing.
    auto kept_by = [&](int64_t i) {
        if (!in_group(i)) return layers[static_cast<size_t>(i)].kept;
        return group[static_cast<size_t>(i)] == i ? rows * config.hidden_size : int64_t{0};
    };
    MicrobatchStashBytes out;
    for (int64_t i = 0; i < n; ++i) out.kept += kept_by(i);
    // The backward in reverse, as model/model_step.cpp runs it: at the last layer of a recomputed group the group
    // is rerun (its input becomes the group's full stashes); then the layer's stash goes (fused) or becomes what
    // its W reads (B). The peak is read after each rerun and each layer.
    auto walk = [&](bool split) {
        int64_t live = out.kept, peak = live;
        for (int64_t i = n - 1; i >= 0; --i) {
            const size_t s = static_cast<size_t>(i);
            if (in_group(i) && (i + 1 == n || group[s + 1] != group[s])) {
                for (int64_t j = group[s]; j <= i; ++j) live += layers[static_cast<size_t>(j)].rerun - kept_by(j);
                peak = std::max(peak, live);
            }
            live -= in_group(i) ? layers[s].rerun : layers[s].kept;
            if (split) live += layers[s].weight_half;
            peak = std::max(peak, live);
        }
        return peak;
    };
    out.backward_peak = walk(false);
    out.input_half_peak = walk(true);
    for (const LayerStashFloats& l : layers) out.weight_half += l.weight_half;
    constexpr int64_t kFloatBytes = 4;
    out.kept *= kFloatBytes, out.backward_peak *= kFloatBytes, out.input_half_peak *= kFloatBytes;
    out.weight_half *= kFloatBytes;
    return out;
}

}  // namespace nb

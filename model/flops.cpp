#include "model/flops.h"

namespace nb {

namespace {

// The matrix parameters a token passes through in block `i` (see the header).
double block_active_matmul_params(const ModelConfig& c, int64_t i) {
    const double d = static_cast<double>(c.hidden_size), kv = static_cast<double>(c.kv_dim());
    const double attention = 2 * d * d + 2 * kv * d;
    if (!c.is_moe_block(i)) return attention + 3 * d * static_cast<double>(c.ffn_hidden_size);
    const MoeConfig& m = c.moe;
    const double router = static_cast<double>(m.num_experts) * d;
    const double experts = 3 * d * static_cast<double>(m.topk * m.ffn_hidden_size + m.shared_ffn_hidden_size);
    return attention + router + experts;
}

}  // namespace

TokenFlops stage_flops_per_token(const ModelConfig& c, const StageSpec& spec, int64_t seq_len) {
    const double d = static_cast<double>(c.hidden_size);
    double n_matmul = 0;
    for (int64_t i = spec.first_block; i < spec.end_block; ++i) n_matmul += block_active_matmul_params(c, i);
    if (spec.has_head) n_matmul += static_cast<double>(c.vocab_size) * d;
    const double attention_square = 4.0 * static_cast<double>(spec.num_blocks()) * static_cast<double>(seq_len) * d;
    return {2.0 * n_matmul + attention_square};
}

double model_flops_per_token(const ModelConfig& c, int64_t seq_len) {
    return stage_flops_per_token(c, whole_model_spec(c), seq_len).training();
}

int64_t stage_active_param_count(const ModelConfig& c, const StageSpec& spec) {
    const MoeConfig& m = c.moe;
    const int64_t unreached_experts = 3 * c.hidden_size * (m.num_experts - m.topk) * m.ffn_hidden_size;
    return stage_param_count(c, spec) - moe_block_count(c, spec) * unreached_experts;
}

}  // namespace nb

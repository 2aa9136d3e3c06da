// MoeConfig: the shape of one Mixture-of-Experts feed-forward (docs/DESIGN.md section 7), with its
// Megatron-style flag names. ModelConfig::moe holds it; ModelConfig::moe_blocks (--moe-layers) says which blocks
// use it (model/config.h).
#pragma once

#include <cstdint>

namespace nb {

struct MoeConfig {
    int64_t num_experts = 8;                // --num-experts E
    int64_t topk = 2;                       // --moe-router-topk k, 1..8 and at most E
    int64_t ffn_hidden_size = 256;          // --moe-ffn-hidden-size: each routed expert's SwiGLU inner size
    int64_t shared_ffn_hidden_size = 0;     // --moe-shared-expert-ffn-hidden-size: 0 = no shared expert
    double aux_loss_coeff = 0.0;            // --moe-aux-loss-coeff (Switch/GShard load balancing)
    bool topk_renorm = false;               // --moe-router-topk-renorm: the k gates sum to 1
    // --moe-router-enable-expert-bias: aux-loss-free balancing (DeepSeek-V3) by a bias that only selects, a buffer
    // layers.<i>.moe.expert_bias updated once per optimizer step (model/moe_layer.h).
    bool expert_bias = false;
    double bias_update_rate = 1e-3;         // --moe-router-bias-update-rate (Megatron's default)
    bool has_shared_expert() const { return shared_ffn_hidden_size > 0; }
    // Throws UsageError naming the flag when the shape is impossible.
    void validate() const;
};

}  // namespace nb

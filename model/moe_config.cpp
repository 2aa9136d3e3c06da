#include "model/moe_config.h"

#include <cmath>

#include <fmt/format.h>

#include "src/core/error.h"

namespace nb {

void MoeConfig::validate() const {
    if (num_experts < 1) throw UsageError(fmt::format("--num-experts must be at least 1, got {}", num_experts));
    if (topk < 1 || topk > 8 || topk > num_experts)
        throw UsageError(fmt::format("--moe-router-topk must be in 1..8 and at most --num-experts {}, got {}",
                                     num_experts, topk));
    if (ffn_hidden_size < 1)
        throw UsageError(fmt::format("--moe-ffn-hidden-size must be at least 1, got {}", ffn_hidden_size));
    if (shared_ffn_hidden_size < 0)
        throw UsageError(fmt::format("--moe-shared-expert-ffn-hidden-size must be 0 (none) or more, got {}",
                                     shared_ffn_hidden_size));
    if (!(aux_loss_coeff >= 0.0) || !std::isfinite(aux_loss_coeff))
        throw UsageError(fmt::format("--moe-aux-loss-coeff must be a finite number >= 0, got {}", aux_loss_coeff));
    if (!(bias_update_rate >= 0.0) || !std::isfinite(bias_update_rate))
        throw UsageError(
            fmt::format("--moe-router-bias-update-rate must be a finite number >= 0, got {}", bias_update_rate));
}

}  // namespace nb

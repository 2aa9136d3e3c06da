// Adan (Xie et al. 2022, "Adan: Adaptive Nesterov Momentum Algorithm"), as sail-sg/Adan's single-tensor path
// with its default proximal weight decay (no_prox = False).
//
// For each parameter p with gradient g_t, at step t = 1, 2, ... (g_0 := g_1, so the first difference is 0):
//   diff = g_t - g_{t-1}
//   m <- beta1 m + (1 - beta1) g_t                    first moment of the gradient
//   d <- beta2 d + (1 - beta2) diff                   first moment of the gradient difference
//   u  = g_t + beta2 diff                             Nesterov-corrected gradient
//   n <- beta3 n + (1 - beta3) u^2                    second moment
//   denom = sqrt(n) / sqrt(1 - beta3^t) + eps
//   p <- p - lr / (1 - beta1^t) * m / denom - lr * beta2 / (1 - beta2^t) * d / denom
//   p <- p / (1 + lr * wd)                             proximal decay (none on norm gains)
// Defaults as published: betas (0.98, 0.92, 0.99) (the paper's 1 - beta: 0.02, 0.08, 0.01), eps 1e-8, wd 0.
// The arithmetic is the backend's kernel, Ops::adan_update, with its step's scalars from adan_scalars()
// (src/ops/optimizer_scalars.h); this class keeps the four state tensors.
#pragma once

#include "optim/optimizer_state.h"

namespace nb {

struct AdanConfig {
    float beta1 = 0.98f;
    float beta2 = 0.92f;
    float beta3 = 0.99f;
    float eps = 1e-8f;
    float weight_decay = 0.0f;
};

class Adan final : public StatefulOptimizer {
public:
    Adan(const ParamLayout& layout, const AdanConfig& cfg, Device device);
    // The bytes of state the constructor allocates for `layout`, before it does (pipeline/stage/stage_memory.h).
    static int64_t state_bytes(const ParamLayout& layout, const AdanConfig& cfg);
    std::string name() const override { return "adan"; }
    void step(Ops& ops, const ParamLayout& layout, TensorSet& weights, const TensorSet& grads, float lr) override;
    // state_tensors(): "exp_avg", "exp_avg_diff", "exp_avg_sq", "previous_grad" (each ".<param>", in layout order).

private:
    AdanConfig cfg_;
    int exp_avg_, exp_avg_diff_, exp_avg_sq_, previous_grad_;
};

}  // namespace nb

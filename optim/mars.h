// MARS (Yuan et al. 2024, "MARS: Unleashing the Power of Variance Reduction for Training Large Models"), the
// MARS-AdamW variant with the approximate gradient difference, as AGI-Arena/MARS mars.py (mars_type
// "mars-adamw", is_approx True, optimize_1d False).
//
// 2-D parameters (embedding, hidden matrices, head), with g_{t-1} the previous step's gradient (0 at first):
//   c = g_t + gamma * beta1 / (1 - beta1) * (g_t - g_{t-1})       variance-reduced gradient
//   c <- c / ||c||_F  when ||c||_F > 1                              per-tensor clipping of c
//   m <- beta1 m + (1 - beta1) c ;  v <- beta2 v + (1 - beta2) c^2
//   p <- p - lr * (wd * p + m / ((sqrt(v) / sqrt(1 - beta2^t) + eps) * (1 - beta1^t)))
// 1-D parameters (norm gains): plain AdamW with their own lr (--adam-lr, MARS's lr_1d), betas (--adam-beta1/2,
// MARS's betas_1d) and decay (--adam-weight-decay; none on norm gains, our rule for every optimizer). That is
// mathematically torch's AdamW, so it is the backend's AdamW kernel.
// Defaults as published: lr 3e-3, betas (0.95, 0.99), eps 1e-8, wd 0, gamma 0.025; 1-D: lr 3e-3, (0.9, 0.95).
// The arithmetic is the backend's: Ops::mars_correction, sum_squares for ||c||_F, Ops::mars_update, and the fused
// AdamW (Ops::adamw_update_multi) for the 1-D parameters.
#pragma once

#include "optim/adamw.h"
#include "optim/optimizer_state.h"

namespace nb {

struct MarsConfig {
    float beta1 = 0.95f;
    float beta2 = 0.99f;
    float eps = 1e-8f;
    float weight_decay = 0.0f;
    float gamma = 0.025f;
    AdamWConfig adam{0.9f, 0.95f, 1e-8f, 0.1f};  // the 1-D parameters' AdamW; its eps is MARS's own (`eps`)
    float adam_lr_ratio = 1.0f;                  // their lr / the scheduled lr (lr_1d / lr)
};

class Mars final : public StatefulOptimizer {
public:
    Mars(const ParamLayout& layout, const MarsConfig& cfg, Device device);
    // The bytes of state the constructor allocates for `layout`, before it does (pipeline/stage/stage_memory.h).
    static int64_t state_bytes(const ParamLayout& layout, const MarsConfig& cfg);
    std::string name() const override { return "mars"; }
    void step(Ops& ops, const ParamLayout& layout, TensorSet& weights, const TensorSet& grads, float lr) override;
    // state_tensors(): "exp_avg", "exp_avg_sq" for every parameter, then "last_grad" for the 2-D ones.

private:
    void mars_update(Ops& ops, const ParamInfo& info, Tensor& w, const Tensor& g, int i, float lr, int64_t t);

    MarsConfig cfg_;
    int exp_avg_, exp_avg_sq_, last_grad_;
};

}  // namespace nb

// Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms"), as lucidrains/lion-pytorch.
//
// For each parameter p with gradient g and momentum m (zeros at first), per step:
//   p <- p * (1 - lr * wd)                              decoupled decay (none on norm gains)
//   p <- p - lr * sign(beta1 * m + (1 - beta1) * g)      the update is a sign: every coordinate moves by lr
//   m <- beta2 * m + (1 - beta2) * g
// Defaults as published: beta1 0.9, beta2 0.99, weight decay 0. (Lion wants a 3-10x smaller lr than AdamW.)
// The arithmetic is the backend's kernel, Ops::lion_update; this class keeps m and decides each weight decay.
#pragma once

#include "optim/optimizer_state.h"

namespace nb {

struct LionConfig {
    float beta1 = 0.9f;
    float beta2 = 0.99f;
    float weight_decay = 0.0f;
};

class Lion final : public StatefulOptimizer {
public:
    Lion(const ParamLayout& layout, const LionConfig& cfg, Device device);
    // The bytes of state the constructor allocates for `layout`, before it does (pipeline/stage/stage_memory.h).
    static int64_t state_bytes(const ParamLayout& layout, const LionConfig& cfg);
    std::string name() const override { return "lion"; }
    void step(Ops& ops, const ParamLayout& layout, TensorSet& weights, const TensorSet& grads, float lr) override;
    // state_tensors(): "exp_avg.<param>" for every parameter (lucidrains' name for m).

private:
    LionConfig cfg_;
    int exp_avg_;
};

}  // namespace nb

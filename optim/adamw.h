// AdamW: Adam with decoupled weight decay, exactly as torch.optim.AdamW (Loshchilov & Hutter).
//
// For each parameter p with gradient g, at step t = 1, 2, ... (wd = 0 where the kind takes no decay):
//   p  <- p * (1 - lr * wd)                          decoupled decay, before the moments
//   m  <- beta1 * m + (1 - beta1) * g                first moment  (torch: exp_avg)
//   v  <- beta2 * v + (1 - beta2) * g^2              second moment (torch: exp_avg_sq)
//   p  <- p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
// The arithmetic itself is the backend's kernel, Ops::adamw_update_multi (every parameter in one fused call,
// each with the bits it would have alone); this class keeps the state and decides each parameter's weight decay.
#pragma once

#include "optim/optimizer_state.h"

namespace nb {

struct AdamWConfig {
    float beta1 = 0.9f;          // --adam-beta1
    float beta2 = 0.95f;         // --adam-beta2
    float eps = 1e-8f;           // --adam-eps
    float weight_decay = 0.1f;   // --weight-decay; only where ParamInfo::weight_decay() (never norm gains)

    // std::logic_error unless betas in [0, 1), eps > 0, weight_decay >= 0, all finite (the flags' ranges are the
    // optimizer registry's to check, for the user).
    void validate() const;
};

// One parameter's entry in a fused AdamW step, decayed only where its kind takes decay (never norm gains).
// AdamW::step collects one per parameter, the auxiliary AdamW of Muon and MARS one per parameter they leave out;
// each then runs them all in one adamw_steps call.
Ops::AdamWParamRef adamw_param_ref(const ParamInfo& info, Tensor& weight, const Tensor& grad, Tensor& m, Tensor& v,
                                   const AdamWConfig& cfg);
// One AdamW step at step t (from 1) of every entry, with cfg's betas and eps: Ops::adamw_update_multi.
void adamw_steps(Ops& ops, const std::vector<Ops::AdamWParamRef>& params, const AdamWConfig& cfg, float lr, int64_t t);

class AdamW final : public StatefulOptimizer {
public:
    // Allocates m and v (zeros) for every parameter of `layout`; validates `cfg`.
    // The state (m, v: f32) lives on `device`, beside the weights it updates.
    AdamW(const ParamLayout& layout, const AdamWConfig& cfg, Device device = Device::cpu);
    // The bytes of state the constructor allocates for `layout`, before it does (pipeline/stage/stage_memory.h).
    static int64_t state_bytes(const ParamLayout& layout, const AdamWConfig& cfg);

    std::string name() const override { return "adamw"; }
    void step(Ops& ops, const ParamLayout& layout, TensorSet& weights, const TensorSet& grads, float lr) override;
    // state_tensors(): "exp_avg.<param>" for every parameter, then "exp_avg_sq.<param>" (torch's state names).

private:
    AdamWConfig cfg_;
    int exp_avg_, exp_avg_sq_;  // first and second moment (pieces of state_)
};

}  // namespace nb

// MoE router: softmax over the experts, top-k selection (optionally biased), and the gates (docs/DESIGN.md section 7).
//
// Per token n (a row of logits [N,E]):
//   p = softmax(logits)                      max-subtracted, exp in f32, the sum in double in expert order
//   score_i = p_i + b_i                      b: the expert bias (DeepSeek-V3's aux-loss-free balancing), or 0
//   e_0 .. e_{k-1} = the k largest scores, best first; equal scores go to the lower expert index
//   gate_j = p_{e_j}                         the bias only selects: a gate is never biased
//   gate_j /= S, S = sum_l p_{e_l}           with renorm (--moe-router-topk-renorm)
//
// Backward (the selection is piecewise constant, so only p carries a gradient):
//   dp_i  = dprobs_i (the aux loss's part, if any)
//   dp_{e_j} += dgate_j                                  without renorm
//   dp_{e_j} += (dgate_j - sum_l dgate_l gate_l) / S     with renorm: d gate_l / d p_{e_j} = (delta_lj - gate_l) / S
//   dlogits_i += p_i (dp_i - sum_m p_m dp_m)             the softmax's Jacobian, the sum in double in expert order
#include <cmath>
#include <vector>

#include "src/cpu/cpu_ops.h"
#include "src/ops/layer_checks.h"

namespace nb {

void CpuOps::moe_router_forward(Tensor& probs, Tensor& topk_expert, Tensor& topk_gate, const Tensor& logits,
                                const Tensor& expert_bias, bool renorm) {
    const OpTimer timer(*this, "moe_router_forward");
    const MoeRouterDims d = check_moe_router_forward(probs, topk_expert, topk_gate, logits, expert_bias);
    const float* bias = expert_bias.defined() ? expert_bias.f32() : nullptr;
    std::vector<char> taken(static_cast<size_t>(d.e));
    for (int64_t n = 0; n < d.n; ++n) {
        const float* z = logits.f32() + n * d.e;
        float* p = probs.f32() + n * d.e;
        float zmax = z[0];
        for (int64_t i = 1; i < d.e; ++i) zmax = std::fmax(zmax, z[i]);
        double total = 0.0;
        for (int64_t i = 0; i < d.e; ++i) {
            p[i] = std::exp(z[i] - zmax);
            total += p[i];
        }
        for (int64_t i = 0; i < d.e; ++i) p[i] = static_cast<float>(p[i] / total);

        // k passes of an arg-max over the experts not yet taken. The strict > keeps the first (lowest) index
        // among equal scores, which is the tie rule; k E comparisons per token is nothing next to the GEMMs.
        int32_t* chosen = topk_expert.i32() + n * d.k;
        float* gate = topk_gate.f32() + n * d.k;
        std::fill(taken.begin(), taken.end(), 0);
        double chosen_sum = 0.0;
        for (int64_t j = 0; j < d.k; ++j) {
            int64_t best = -1;
            float best_score = 0.0f;
            for (int64_t i = 0; i < d.e; ++i) {
                if (taken[static_cast<size_t>(i)]) continue;
                const float score = bias ? p[i] + bias[i] : p[i];
                if (best < 0 || score > best_score) {
                    best = i;
                    best_score = score;
                }
            }
            taken[static_cast<size_t>(best)] = 1;
            chosen[j] = static_cast<int32_t>(best);
            gate[j] = p[best];
            chosen_sum += p[best];
        }
        if (renorm)
            for (int64_t j = 0; j < d.k; ++j) gate[j] = static_cast<float>(gate[j] / chosen_sum);
    }
}

void CpuOps::moe_router_backward(Tensor& dlogits, const Tensor& dprobs, const Tensor& dgate, const Tensor& probs,
                                 const Tensor& topk_expert, const Tensor& topk_gate, bool renorm) {
    const OpTimer timer(*this, "moe_router_backward");
    const MoeRouterDims d = check_moe_router_backward(dlogits, dprobs, dgate, probs, topk_expert, topk_gate);
    std::vector<double> dp(static_cast<size_t>(d.e));
    for (int64_t n = 0; n < d.n; ++n) {
        const float* p = probs.f32() + n * d.e;
        const int32_t* chosen = topk_expert.i32() + n * d.k;
        const float* gate = topk_gate.f32() + n * d.k;
        const float* dg = dgate.f32() + n * d.k;
        for (int64_t i = 0; i < d.e; ++i) dp[static_cast<size_t>(i)] = dprobs.defined() ? dprobs.f32()[n * d.e + i] : 0.0;
        if (renorm) {
            double chosen_sum = 0.0, dot = 0.0;
            for (int64_t j = 0; j < d.k; ++j) {
                chosen_sum += p[chosen[j]];
                dot += static_cast<double>(dg[j]) * gate[j];
            }
            for (int64_t j = 0; j < d.k; ++j) dp[static_cast<size_t>(chosen[j])] += (dg[j] - dot) / chosen_sum;
        } else {
            for (int64_t j = 0; j < d.k; ++j) dp[static_cast<size_t>(chosen[j])] += dg[j];
        }
        double p_dot_dp = 0.0;
        for (int64_t i = 0; i < d.e; ++i) p_dot_dp += p[i] * dp[static_cast<size_t>(i)];
        float* dz = dlogits.f32() + n * d.e;
        for (int64_t i = 0; i < d.e; ++i) dz[i] += static_cast<float>(p[i] * (dp[static_cast<size_t>(i)] - p_dot_dp));
    }
}

}  // namespace nb

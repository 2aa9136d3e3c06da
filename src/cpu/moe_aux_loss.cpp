// The Switch/GShard load-balancing loss of one MoE layer over one microbatch (docs/DESIGN.md section 7):
//
//   L_aux = coeff E sum_i f_i P_i,   f_i = (pairs routed to i) / R  (R = N k),   P_i = (1/N) sum_n p[n,i]
//
// f_i comes from the dispatch plan's offsets (expert_offsets[i+1] - expert_offsets[i]) and is a count: it has no
// gradient. The gradient is therefore the same for every token: dL_aux / dp[n,i] = coeff E f_i / N.
// Sums in double, in index order (tokens outer, experts inner for P; experts for the loss).
#include <vector>

#include "src/cpu/cpu_ops.h"
#include "src/ops/layer_checks.h"

namespace nb {

namespace {

// f_i = count_i / R; all zero when there are no pairs (an empty microbatch has no load and no loss).
std::vector<double> routed_fraction(const Tensor& expert_offsets, int64_t experts) {
    const int32_t* off = expert_offsets.i32();
    const double pairs = off[experts];
    std::vector<double> f(static_cast<size_t>(experts), 0.0);
    if (pairs > 0)
        for (int64_t i = 0; i < experts; ++i) f[static_cast<size_t>(i)] = (off[i + 1] - off[i]) / pairs;
    return f;
}

}  // namespace

void CpuOps::moe_aux_loss_forward(Tensor& loss, const Tensor& probs, const Tensor& expert_offsets, float coeff) {
    const OpTimer timer(*this, "moe_aux_loss_forward");
    const MoeRouterDims d = check_moe_aux_loss_forward(loss, probs, expert_offsets);
    const std::vector<double> f = routed_fraction(expert_offsets, d.e);
    std::vector<double> mean_p(static_cast<size_t>(d.e), 0.0);
    for (int64_t n = 0; n < d.n; ++n)
        for (int64_t i = 0; i < d.e; ++i) mean_p[static_cast<size_t>(i)] += probs.f32()[n * d.e + i];
    double total = 0.0;
    if (d.n > 0)
        for (int64_t i = 0; i < d.e; ++i) total += f[static_cast<size_t>(i)] * (mean_p[static_cast<size_t>(i)] / d.n);
    loss.f32()[0] = static_cast<float>(static_cast<double>(coeff) * d.e * total);
}

void CpuOps::moe_aux_loss_backward(Tensor& dprobs, const Tensor& expert_offsets, float coeff, float dloss) {
    const OpTimer timer(*this, "moe_aux_loss_backward");
    const MoeRouterDims d = check_moe_aux_loss_backward(dprobs, expert_offsets);
    if (d.n == 0) return;
    const std::vector<double> f = routed_fraction(expert_offsets, d.e);
    std::vector<float> per_expert(static_cast<size_t>(d.e));
    for (int64_t i = 0; i < d.e; ++i)
        per_expert[static_cast<size_t>(i)] =
            static_cast<float>(static_cast<double>(dloss) * coeff * d.e * f[static_cast<size_t>(i)] / d.n);
    for (int64_t n = 0; n < d.n; ++n)
        for (int64_t i = 0; i < d.e; ++i) dprobs.f32()[n * d.e + i] += per_expert[static_cast<size_t>(i)];
}

}  // namespace nb

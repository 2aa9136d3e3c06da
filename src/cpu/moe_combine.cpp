// MoE unpermute and combine: each token's output is the gate-weighted sum of its k experts' outputs, in slot
// order (docs/DESIGN.md section 7), read back from the permuted rows through row_of_pair.
//
//   y[n, :] = sum_{j = 0..k-1} gate[n, j] expert_out[row_of_pair[n k + j], :]    (y overwritten; slot order)
// Backward:
//   dexpert_out[row, :] += gate[n, j] dy[n, :]
//   dgate[n, j]         += sum_c dy[n, c] expert_out[row, c]                    (in double, in c order)
#include "src/cpu/cpu_ops.h"
#include "src/ops/layer_checks.h"

namespace nb {

void CpuOps::moe_combine_forward(Tensor& y, const Tensor& expert_out, const Tensor& topk_gate,
                                 const Tensor& row_of_pair) {
    const OpTimer timer(*this, "moe_combine_forward");
    const MoeRowDims d = check_moe_combine_forward(y, expert_out, topk_gate, row_of_pair);
    for (int64_t n = 0; n < d.n; ++n) {
        float* out = y.f32() + n * d.d;
        for (int64_t c = 0; c < d.d; ++c) out[c] = 0.0f;
        for (int64_t j = 0; j < d.k; ++j) {
            const float g = topk_gate.f32()[n * d.k + j];
            const float* src = expert_out.f32() + row_of_pair.i32()[n * d.k + j] * d.d;
            for (int64_t c = 0; c < d.d; ++c) out[c] += g * src[c];
        }
    }
}

void CpuOps::moe_combine_backward(Tensor& dexpert_out, Tensor& dgate, const Tensor& dy, const Tensor& expert_out,
                                  const Tensor& topk_gate, const Tensor& row_of_pair) {
    const OpTimer timer(*this, "moe_combine_backward");
    const MoeRowDims d = check_moe_combine_backward(dexpert_out, dgate, dy, expert_out, topk_gate, row_of_pair);
    for (int64_t n = 0; n < d.n; ++n) {
        const float* go = dy.f32() + n * d.d;
        for (int64_t j = 0; j < d.k; ++j) {
            const int64_t row = row_of_pair.i32()[n * d.k + j];
            const float g = topk_gate.f32()[n * d.k + j];
            const float* out = expert_out.f32() + row * d.d;
            float* dout = dexpert_out.f32() + row * d.d;
            double dot = 0.0;
            for (int64_t c = 0; c < d.d; ++c) {
                dout[c] += g * go[c];
                dot += static_cast<double>(go[c]) * out[c];
            }
            dgate.f32()[n * d.k + j] += static_cast<float>(dot);
        }
    }
}

}  // namespace nb

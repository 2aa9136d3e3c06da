// MoE grouped linear: each expert's contiguous rows of the permuted activations times that expert's own weight.
//
//   y[r, :] = x[r, :] W_e^T        for expert_offsets[e] <= r < expert_offsets[e+1]      (W_e [out, in])
// Backward, per expert over its rows:
//   dx[rows_e]  += dy[rows_e] W_e
//   dW_e        += dy[rows_e]^T x[rows_e]
// One tiled sgemm per expert that has rows, as linear.cpp does for one weight (same argument order, same
// determinism: the tiles depend on the expert's shapes alone, never the thread count). An expert without rows does
// no GEMM and its weight gradient is left as it was (plus nothing).
#include <algorithm>

#include "src/cpu/cpu_ops.h"
#include "src/cpu/tiled_gemm.h"
#include "src/ops/layer_checks.h"

namespace nb {

void CpuOps::moe_grouped_linear_forward(Tensor& y, const Tensor& x, const std::vector<const Tensor*>& w,
                                        const Tensor& expert_offsets) {
    const OpTimer timer(*this, "moe_grouped_linear_forward");
    const LinearDims d = check_moe_grouped_linear_forward(y, x, w, expert_offsets);
    check_moe_offsets_partition("moe_grouped_linear_forward", expert_offsets.i32(), expert_offsets.numel() - 1, d.n);
    if (d.out == 0) return;
    const int32_t* off = expert_offsets.i32();
    for (size_t e = 0; e < w.size(); ++e) {
        const int64_t begin = off[e], rows = off[e + 1] - begin;
        if (rows == 0) continue;
        float* ye = y.f32() + begin * d.out;
        cpu::sgemm(false, true, rows, d.out, d.in, 1.0f, x.f32() + begin * d.in, d.in, w[e]->f32(), d.in, 0.0f, ye,
                   d.out);
    }
}

void CpuOps::moe_grouped_linear_backward(Tensor& dx, const std::vector<Tensor*>& dw, const Tensor& dy,
                                         const Tensor& x, const std::vector<const Tensor*>& w,
                                         const Tensor& expert_offsets) {
    const OpTimer timer(*this, "moe_grouped_linear_backward");
    const LinearDims d = check_moe_grouped_linear_backward(dx, dw, dy, x, w, expert_offsets);
    check_moe_offsets_partition("moe_grouped_linear_backward", expert_offsets.i32(), expert_offsets.numel() - 1, d.n);
    if (d.in == 0 || d.out == 0) return;  // every sum is empty
    const int32_t* off = expert_offsets.i32();
    for (size_t e = 0; e < w.size(); ++e) {
        const int64_t begin = off[e], rows = off[e + 1] - begin;
        if (rows == 0) continue;
        const float *dye = dy.f32() + begin * d.out, *xe = x.f32() + begin * d.in;
        if (dx.defined())
            cpu::sgemm(false, false, rows, d.in, d.out, 1.0f, dye, d.out, w[e]->f32(), d.in, 1.0f,
                       dx.f32() + begin * d.in, d.in);
        if (!dw.empty())
            cpu::sgemm(true, false, d.out, d.in, rows, 1.0f, dye, d.out, xe, d.in, 1.0f, dw[e]->f32(), d.in);
    }
}

}  // namespace nb

// MoE dropless dispatch: the plan (which permuted row holds which (token, slot) pair) and the permutation of the
// token rows into expert order (docs/DESIGN.md section 7).
//
// A pair p = n k + j is token n's slot j, routed to expert topk_expert[n, j]. The plan is a stable counting sort
// of the pairs by expert:
//   count_e            = pairs routed to e
//   expert_offsets[e]  = count_0 + ... + count_{e-1}          (expert_offsets[E] = R = N k)
//   pairs visited in increasing p, each put at its expert's next free row: row_of_pair[p] = r, pair_of_row[r] = p
// Increasing p is increasing (token, slot), so within an expert the rows are ordered by token index (a token
// never picks one expert twice), as torchtitan's stable argsort of the expert ids orders them.
//
// Permute:   xp[r, :] = x[pair_of_row[r] / k, :]
// Backward:  dx[n, :] += sum_{j = 0..k-1} dxp[row_of_pair[n k + j], :]      in slot order: a fixed summation order
#include <algorithm>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

#include "src/cpu/cpu_ops.h"
#include "src/ops/layer_checks.h"

namespace nb {

void CpuOps::moe_dispatch_plan(Tensor& pair_of_row, Tensor& row_of_pair, Tensor& expert_offsets,
                               const Tensor& topk_expert) {
    const OpTimer timer(*this, "moe_dispatch_plan");
    const MoeRouterDims d = check_moe_dispatch_plan(pair_of_row, row_of_pair, expert_offsets, topk_expert);
    const int64_t pairs = d.n * d.k;
    const int32_t* expert = topk_expert.i32();
    int32_t* off = expert_offsets.i32();
    std::vector<int32_t> next(static_cast<size_t>(d.e) + 1, 0);
    for (int64_t p = 0; p < pairs; ++p) {
        if (expert[p] < 0 || expert[p] >= d.e)
            throw std::invalid_argument(fmt::format("moe_dispatch_plan: pair {} is routed to expert {}, not in [0, {})",
                                                    p, expert[p], d.e));
        ++next[static_cast<size_t>(expert[p]) + 1];
    }
    for (int64_t e = 0; e < d.e; ++e) next[static_cast<size_t>(e) + 1] += next[static_cast<size_t>(e)];
    for (int64_t e = 0; e <= d.e; ++e) off[e] = next[static_cast<size_t>(e)];
    for (int64_t p = 0; p < pairs; ++p) {
        const int32_t r = next[static_cast<size_t>(expert[p])]++;
        row_of_pair.i32()[p] = r;
        pair_of_row.i32()[r] = static_cast<int32_t>(p);
    }
}

void CpuOps::moe_permute_forward(Tensor& xp, const Tensor& x, const Tensor& pair_of_row) {
    const OpTimer timer(*this, "moe_permute_forward");
    const MoeRowDims d = check_moe_permute_forward(xp, x, pair_of_row);
    const int64_t rows = d.n * d.k;
    for (int64_t r = 0; r < rows; ++r) {
        const float* src = x.f32() + (pair_of_row.i32()[r] / d.k) * d.d;
        std::copy(src, src + d.d, xp.f32() + r * d.d);
    }
}

void CpuOps::moe_permute_backward(Tensor& dx, const Tensor& dxp, const Tensor& row_of_pair) {
    const OpTimer timer(*this, "moe_permute_backward");
    const MoeRowDims d = check_moe_permute_backward(dx, dxp, row_of_pair);
    for (int64_t n = 0; n < d.n; ++n) {
        float* out = dx.f32() + n * d.d;
        for (int64_t j = 0; j < d.k; ++j) {
            const float* src = dxp.f32() + row_of_pair.i32()[n * d.k + j] * d.d;
            for (int64_t c = 0; c < d.d; ++c) out[c] += src[c];
        }
    }
}

}  // namespace nb

// Linear layer (no bias): y = x W^T with W stored [out, in] as torch.nn.Linear.
//
// All three products are tiled sgemms (src/cpu/tiled_gemm.h). Row-major throughout; leading dims of x/y are
// flattened into N rows, so x may be [N, in] or [B, T, in]. Forward overwrites (beta = 0); backward accumulates
// (beta = 1) as the op contract asks. The tiles depend on the shapes alone and no sum is split, so each element's
// sum has one order for any thread count (tests/unit/test_ops_determinism.cpp checks it).
#include "src/cpu/cpu_ops.h"
#include "src/cpu/tiled_gemm.h"
#include "src/ops/layer_checks.h"

namespace nb {

// y[n, o] = sum_i x[n, i] * w[o, i]
void CpuOps::linear_forward(Tensor& y, const Tensor& x, const Tensor& w) {
    const OpTimer timer(*this, "linear_forward");
    const LinearDims d = check_linear_forward(y, x, w);
    if (d.n == 0 || d.out == 0) return;
    if (d.n == 1) {  // one token (a decode step): W read once (src/cpu/tiled_gemm.h sgemv_rows)
        cpu::sgemv_rows(d.out, d.in, w.f32(), d.in, x.f32(), y.f32());
        return;
    }
    cpu::sgemm(false, true, d.n, d.out, d.in, 1.0f, x.f32(), d.in, w.f32(), d.in, 0.0f, y.f32(), d.out);
}

// dx[n, i] += sum_o dy[n, o] * w[o, i]     (dx += dy W)
// dw[o, i] += sum_n dy[n, o] * x[n, i]     (dw += dy^T x)
// An undefined dx or dw is not wanted and is skipped.
void CpuOps::linear_backward(Tensor& dx, Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& w) {
    const OpTimer timer(*this, "linear_backward");
    const LinearDims d = check_linear_backward(dx, dw, dy, x, w);
    if (d.n == 0 || d.in == 0 || d.out == 0) return;  // every sum is empty: nothing to add
    if (dx.defined())
        cpu::sgemm(false, false, d.n, d.in, d.out, 1.0f, dy.f32(), d.out, w.f32(), d.in, 1.0f, dx.f32(), d.in);
    if (dw.defined())
        cpu::sgemm(true, false, d.out, d.in, d.n, 1.0f, dy.f32(), d.out, x.f32(), d.in, 1.0f, dw.f32(), d.in);
}

}  // namespace nb

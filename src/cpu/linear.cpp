// Linear layer (no bias): y = x W^T with W stored [out, in] as torch.nn.Linear.
//
// All three products go to OpenBLAS sgemm. Row-major throughout; leading dims of x/y are flattened into N
// rows, so x may be [N, in] or [B, T, in]. Forward overwrites (beta = 0); backward accumulates (beta = 1) as
// the op contract asks. OpenBLAS splits the output tile grid over its threads, never the K reduction, so each
// element's sum has one order for any thread count (tests/unit/test_ops_determinism.cpp checks it).
#include <cblas.h>

#include <stdexcept>

#include <fmt/format.h>

#include "src/cpu/cpu_ops.h"

namespace nb {

namespace {

struct LinearDims {
    int64_t n, in, out;
};

// Rows of a tensor whose last dim is `cols` (a rank >= 1 tensor read as [numel / cols, cols]).
int64_t rows_of(const Tensor& t, int64_t cols) { return cols == 0 ? 0 : t.numel() / cols; }

// x[.., in], w[out, in], y[.., out] with the same number of rows.
LinearDims check_linear(const char* op, const Tensor& y, const Tensor& x, const Tensor& w) {
    if (w.rank() != 2 || x.rank() < 1 || y.rank() < 1 || x.dim(-1) != w.dim(1) || y.dim(-1) != w.dim(0) ||
        rows_of(x, w.dim(1)) != rows_of(y, w.dim(0)))
        throw std::invalid_argument(
            fmt::format("{}: expected x [N, in], w [out, in], y/dy [N, out]; got x {}, w {}, y {}", op,
                        shape_string(x.shape()), shape_string(w.shape()), shape_string(y.shape())));
    return {rows_of(x, w.dim(1)), w.dim(1), w.dim(0)};
}

}  // namespace

// y[n, o] = sum_i x[n, i] * w[o, i]
void CpuOps::linear_forward(Tensor& y, const Tensor& x, const Tensor& w) {
    const OpTimer timer(*this, "linear_forward");
    const LinearDims d = check_linear("linear_forward", y, x, w);
    if (d.n == 0 || d.out == 0) return;
    if (d.in == 0) {  // an empty sum; OpenBLAS rejects lda = 0
        y.zero();
        return;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, d.n, d.out, d.in, 1.0f, x.f32(), d.in, w.f32(), d.in, 0.0f,
                y.f32(), d.out);
}

// dx[n, i] += sum_o dy[n, o] * w[o, i]     (dx += dy W)
// dw[o, i] += sum_n dy[n, o] * x[n, i]     (dw += dy^T x)
// An undefined dx or dw is not wanted and is skipped.
void CpuOps::linear_backward(Tensor& dx, Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& w) {
    const OpTimer timer(*this, "linear_backward");
    const LinearDims d = check_linear("linear_backward", dy, x, w);
    if (dx.defined() && dx.numel() != x.numel())
        throw std::invalid_argument(fmt::format("linear_backward: dx {} does not match x {}", shape_string(dx.shape()),
                                                shape_string(x.shape())));
    if (dw.defined() && dw.shape() != w.shape())
        throw std::invalid_argument(fmt::format("linear_backward: dw {} does not match w {}", shape_string(dw.shape()),
                                                shape_string(w.shape())));
    if (d.n == 0 || d.in == 0 || d.out == 0) return;  // every sum is empty: nothing to add
    if (dx.defined())
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, d.n, d.in, d.out, 1.0f, dy.f32(), d.out, w.f32(), d.in,
                    1.0f, dx.f32(), d.in);
    if (dw.defined())
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, d.out, d.in, d.n, 1.0f, dy.f32(), d.out, x.f32(), d.in,
                    1.0f, dw.f32(), d.in);
}

}  // namespace nb

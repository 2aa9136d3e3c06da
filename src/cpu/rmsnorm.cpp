// RMSNorm over the last dim d (LLaMA): y = x * rstd * gain, rstd = 1 / sqrt(mean_j x_j^2 + eps).
//
// x and y are [.., d] read as N rows; rstd holds one float per row (saved for backward).
// Precision choice: the per-row sums (sum of squares, and the dot in backward) accumulate in double. This is
// the reference backend, and double sums make its rows independent of summation order effects at large d;
// the per-element arithmetic stays float.
#include <cmath>
#include <vector>

#include "src/cpu/cpu_ops.h"
#include "src/ops/layer_checks.h"

namespace nb {

// rstd[n] = 1 / sqrt(sum_j x[n,j]^2 / d + eps)     (double, rounded once to float)
// y[n,j]  = (x[n,j] * rstd[n]) * gain[j]           (float, the order of HF LlamaRMSNorm)
void CpuOps::rmsnorm_forward(Tensor& y, Tensor& rstd, const Tensor& x, const Tensor& gain, float eps) {
    const OpTimer timer(*this, "rmsnorm_forward");
    const int64_t n_rows = check_rmsnorm_forward(y, rstd, x, gain), d = gain.dim(0);
    const float* xp = x.f32();
    const float* g = gain.f32();
    float* yp = y.f32();
    float* rs = rstd.f32();
    for (int64_t n = 0; n < n_rows; ++n) {
        const float* xr = xp + n * d;
        double ss = 0.0;
        for (int64_t j = 0; j < d; ++j) ss += static_cast<double>(xr[j]) * xr[j];
        const float r = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(d) + eps));
        rs[n] = r;
        float* yr = yp + n * d;
        for (int64_t j = 0; j < d; ++j) yr[j] = (xr[j] * r) * g[j];
    }
}

// With u = dy * gain:
//   dx[n,j]  += rstd * (u_j - x_j * rstd^2 * mean_k(u_k x_k))
//   dgain[j] += sum_n dy[n,j] * x[n,j] * rstd[n]       (summed over rows in row order, in double)
void CpuOps::rmsnorm_backward(Tensor& dx, Tensor& dgain, const Tensor& dy, const Tensor& x, const Tensor& gain,
                              const Tensor& rstd) {
    const OpTimer timer(*this, "rmsnorm_backward");
    const int64_t n_rows = check_rmsnorm_backward(dx, dgain, dy, x, gain, rstd), d = gain.dim(0);
    const float* xp = x.f32();
    const float* dyp = dy.f32();
    const float* g = gain.f32();
    const float* rs = rstd.f32();
    // Two loops, so that each output's arithmetic is the same whether the other is wanted or not (a split
    // backward asks for dx and dgain in separate calls, model/weight_grads.h).
    if (dx.defined()) {
        float* dxp = dx.f32();
        for (int64_t n = 0; n < n_rows; ++n) {
            const float* xr = xp + n * d;
            const float* dyr = dyp + n * d;
            const float r = rs[n];
            double dot = 0.0;  // sum_k (dy_k gain_k) x_k
            for (int64_t k = 0; k < d; ++k) dot += static_cast<double>(dyr[k] * g[k]) * xr[k];
            const float c = static_cast<float>(static_cast<double>(r) * r * (dot / static_cast<double>(d)));
            float* dxr = dxp + n * d;
            for (int64_t j = 0; j < d; ++j) dxr[j] += r * (dyr[j] * g[j] - xr[j] * c);
        }
    }
    if (!dgain.defined()) return;
    std::vector<double> dgain_acc(static_cast<size_t>(d), 0.0);
    for (int64_t n = 0; n < n_rows; ++n) {
        const float* xr = xp + n * d;
        const float* dyr = dyp + n * d;
        const float r = rs[n];
        for (int64_t j = 0; j < d; ++j) dgain_acc[static_cast<size_t>(j)] += static_cast<double>(dyr[j] * xr[j] * r);
    }
    float* dg = dgain.f32();
    for (int64_t j = 0; j < d; ++j) dg[j] += static_cast<float>(dgain_acc[static_cast<size_t>(j)]);
}

}  // namespace nb

// The small kernels of SOAP's step (optim/soap.cpp) on the CPU: Rayleigh quotients of a basis, reordering rows
// or columns, a diagonal shift, torch.lerp, a scaled add and Adam's direction. The math of each is in src/ops/ops.h;
// every operation is rounded on its own in the order written there (the build has -ffp-contract=off), which is
// what cuda/soap.cu does with explicitly rounded intrinsics, so both backends give the same bits.
#include <cmath>

#include "src/cpu/cpu_ops.h"
#include "src/ops/linalg_checks.h"
#include "src/ops/optimizer_checks.h"

namespace nb {

using namespace linalg_checks;

namespace {

// a[i] = f(a[i], b[i]) for every i, after the checks of the optimizer kernel `op` (b may be a: each element is read
// before it is written).
template <typename F>
void update_elementwise(const char* op, Tensor& a, const Tensor& b, F f) {
    check_optimizer_tensors(op, Device::cpu, {{"a", &a}, {"b", &b}});
    const int64_t n = a.numel();
    float* ap = a.f32();
    const float* bp = b.f32();
    for (int64_t i = 0; i < n; ++i) ap[i] = f(ap[i], bp[i]);
}

}  // namespace

// out[j] = sum_i a[i,j] * b[i,j], i = 0, 1, ...
void CpuOps::column_dots(Tensor& out, const Tensor& a, const Tensor& b) {
    const OpTimer timer(*this, "column_dots");
    const auto [m, n] = check_column_dots(out, a, b, Device::cpu);
    const float *ap = a.f32(), *bp = b.f32();
    float* o = out.f32();
    for (int64_t j = 0; j < n; ++j) o[j] = 0.0f;
    for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) o[j] += ap[i * n + j] * bp[i * n + j];
}

// dim 0: dst[i,j] = src[index[i], j];  dim 1: dst[i,j] = src[i, index[j]]
void CpuOps::index_select(Tensor& dst, const Tensor& src, int dim, const std::vector<int64_t>& index) {
    const OpTimer timer(*this, "index_select");
    check_index_select(dst, src, dim, index, Device::cpu);
    const int64_t rows = dst.dim(0), cols = dst.dim(1), src_cols = src.dim(1);
    const float* s = src.f32();
    float* d = dst.f32();
    for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) {
            const int64_t si = dim == 0 ? index[static_cast<size_t>(i)] : i;
            const int64_t sj = dim == 1 ? index[static_cast<size_t>(j)] : j;
            d[i * cols + j] = s[si * src_cols + sj];
        }
}

// a[k,k] += s
void CpuOps::add_to_diagonal(Tensor& a, float s) {
    const OpTimer timer(*this, "add_to_diagonal");
    const int64_t n = require_square("add_to_diagonal", "a", a, Device::cpu);
    float* p = a.f32();
    for (int64_t k = 0; k < n; ++k) p[k * n + k] += s;
}

// a = torch.lerp(a, b, w): the form whose rounding stays small for this w.
void CpuOps::lerp_inplace(Tensor& a, const Tensor& b, float w) {
    const OpTimer timer(*this, "lerp_inplace");
    const bool small = std::fabs(w) < 0.5f;
    const float one_minus_w = 1.0f - w;
    update_elementwise("lerp_inplace", a, b,
                       [&](float x, float y) { return small ? x + w * (y - x) : y - (y - x) * one_minus_w; });
}

// a = a + alpha*b (b may be a)
void CpuOps::add_scaled_inplace(Tensor& a, const Tensor& b, float alpha) {
    const OpTimer timer(*this, "add_scaled_inplace");
    update_elementwise("add_scaled_inplace", a, b, [alpha](float x, float y) { return x + alpha * y; });
}

// m = m*b1 + c1*g ; v = v*b2 + c2*(g*g) ; direction = m / (sqrt(v) + eps)
void CpuOps::adam_direction(Tensor& direction, Tensor& m, Tensor& v, const Tensor& g, float beta1, float beta2,
                            float eps) {
    const OpTimer timer(*this, "adam_direction");
    check_optimizer_tensors("adam_direction", Device::cpu,
                            {{"g", &g}, {"m", &m}, {"v", &v}, {"direction", &direction}});
    const int64_t n = g.numel();
    const float c1 = static_cast<float>(1.0 - static_cast<double>(beta1));
    const float c2 = static_cast<float>(1.0 - static_cast<double>(beta2));
    float *d = direction.f32(), *mp = m.f32(), *vp = v.f32();
    const float* gp = g.f32();
    for (int64_t i = 0; i < n; ++i) {
        mp[i] = mp[i] * beta1 + c1 * gp[i];
        vp[i] = vp[i] * beta2 + c2 * (gp[i] * gp[i]);
        d[i] = mp[i] / (std::sqrt(vp[i]) + eps);
    }
}

}  // namespace nb

// Element-wise updates and reductions over the flat element order of a tensor.
//
// add_inplace asks only for equal element counts (a residual may be [N, d] on one side and [B, T, d] on the
// other); the reductions accumulate in double in index order, so they are reproducible to the bit.
#include <stdexcept>

#include <fmt/format.h>

#include "src/cpu/cpu_ops.h"

namespace nb {

// a[i] += b[i]
void CpuOps::add_inplace(Tensor& a, const Tensor& b) {
    const OpTimer timer(*this, "add_inplace");
    if (a.numel() != b.numel())
        throw std::invalid_argument(fmt::format("add_inplace: a {} and b {} differ in element count",
                                                shape_string(a.shape()), shape_string(b.shape())));
    float* ap = a.f32();
    const float* bp = b.f32();
    for (int64_t i = 0, n = a.numel(); i < n; ++i) ap[i] += bp[i];
}

// a[i] *= s
void CpuOps::scale_inplace(Tensor& a, float s) {
    const OpTimer timer(*this, "scale_inplace");
    float* ap = a.f32();
    for (int64_t i = 0, n = a.numel(); i < n; ++i) ap[i] *= s;
}

// sum_i x[i], in double, i = 0, 1, ...
double CpuOps::sum(const Tensor& x) {
    const OpTimer timer(*this, "sum");
    const float* p = x.f32();
    double acc = 0.0;
    for (int64_t i = 0, n = x.numel(); i < n; ++i) acc += p[i];
    return acc;
}

// sum_i x[i]^2, in double (each square exact in double), i = 0, 1, ...
double CpuOps::sum_squares(const Tensor& x) {
    const OpTimer timer(*this, "sum_squares");
    const float* p = x.f32();
    double acc = 0.0;
    for (int64_t i = 0, n = x.numel(); i < n; ++i) acc += static_cast<double>(p[i]) * p[i];
    return acc;
}

}  // namespace nb

namespace nb {

// dst = src: the CPU backend computes in f32 only, so a cast is a copy between f32 tensors.
void CpuOps::cast(Tensor& dst, const Tensor& src) {
    const OpTimer timer(*this, "cast");
    if (dst.dtype() != DType::f32 || src.dtype() != DType::f32)
        throw std::invalid_argument(fmt::format("cast: the CPU backend has no {} <- {} conversion",
                                                dtype_name(dst.dtype()), dtype_name(src.dtype())));
    dst.copy_from(src);
}

}  // namespace nb

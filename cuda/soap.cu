// The small kernels of SOAP's step (optim/soap.cpp) on the device, the CPU's arithmetic (src/cpu/soap.cpp) with
// explicitly rounded intrinsics (__fadd_rn, __fsub_rn, __fmul_rn, __fdiv_rn, __fsqrt_rn), so that nvcc contracts
// nothing into an FMA and approximates nothing: given the same inputs, each result is the CPU's bit for bit.
//
//   column_dots:        out[j] = sum_i a[i,j] * b[i,j]       one thread per column, i ascending from 0.f
//   index_select:       dim 0: dst[i,j] = src[index[i], j];  dim 1: dst[i,j] = src[i, index[j]]
//   add_to_diagonal:    a[k,k] += s
//   lerp_inplace:       |w| < 0.5 ? a + w*(b - a) : b - (b - a)*(1 - w)          (torch.lerp)
//   add_scaled_inplace: a = a + alpha*b
//   adam_direction:     m = m*b1 + c1*g ; v = v*b2 + c2*(g*g) ; direction = m / (sqrt(v) + eps)
//
// No reductions across threads and no atomics: every output element is written by one thread in a fixed order.
// index_select's index arrives as host data, is range-checked there, and travels to the device as i32.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "cuda/context.h"
#include "cuda/cuda_check.h"
#include "cuda/cuda_ops.h"
#include "cuda/grid_stride.cuh"
#include "src/ops/linalg_checks.h"
#include "src/ops/optimizer_checks.h"

namespace nb::cuda {

namespace {

using namespace linalg_checks;

__global__ void column_dots_kernel(float* __restrict__ out, const float* __restrict__ a, const float* __restrict__ b,
                                   int64_t m, int64_t n) {
    for (int64_t j = first_element(); j < n; j += element_stride()) {
        float acc = 0.0f;
        for (int64_t i = 0; i < m; ++i) acc = __fadd_rn(acc, __fmul_rn(a[i * n + j], b[i * n + j]));
        out[j] = acc;
    }
}

__global__ void index_select_kernel(float* __restrict__ dst, const float* __restrict__ src,
                                    const int32_t* __restrict__ index, int dim, int64_t rows, int64_t cols,
                                    int64_t src_cols) {
    for (int64_t e = first_element(); e < rows * cols; e += element_stride()) {
        const int64_t i = e / cols, j = e % cols;
        const int64_t si = dim == 0 ? index[i] : i;
        const int64_t sj = dim == 1 ? index[j] : j;
        dst[e] = src[si * src_cols + sj];
    }
}

__global__ void add_to_diagonal_kernel(float* a, float s, int64_t n) {
    for (int64_t k = first_element(); k < n; k += element_stride()) a[k * n + k] = __fadd_rn(a[k * n + k], s);
}

__global__ void lerp_kernel(float* a, const float* b, float w, float one_minus_w, bool small, int64_t n) {
    for (int64_t i = first_element(); i < n; i += element_stride()) {
        const float ai = a[i], bi = b[i];
        const float diff = __fsub_rn(bi, ai);
        a[i] = small ? __fadd_rn(ai, __fmul_rn(w, diff)) : __fsub_rn(bi, __fmul_rn(diff, one_minus_w));
    }
}

// b may alias a (a = a + alpha*a): each element is read before it is written, by the same thread.
__global__ void add_scaled_kernel(float* a, const float* b, float alpha, int64_t n) {
    for (int64_t i = first_element(); i < n; i += element_stride()) a[i] = __fadd_rn(a[i], __fmul_rn(alpha, b[i]));
}

struct AdamDirectionScalars {
    float beta1, c1, beta2, c2, eps;
};

__global__ void adam_direction_kernel(float* __restrict__ direction, float* __restrict__ m, float* __restrict__ v,
                                      const float* __restrict__ g, AdamDirectionScalars s, int64_t n) {
    for (int64_t i = first_element(); i < n; i += element_stride()) {
        const float gi = g[i];
        const float mi = __fadd_rn(__fmul_rn(m[i], s.beta1), __fmul_rn(s.c1, gi));
        const float vi = __fadd_rn(__fmul_rn(v[i], s.beta2), __fmul_rn(s.c2, __fmul_rn(gi, gi)));
        m[i] = mi;
        v[i] = vi;
        direction[i] = __fdiv_rn(mi, __fadd_rn(__fsqrt_rn(vi), s.eps));
    }
}

float* f32_data(Tensor& t) { return static_cast<float*>(t.data()); }
const float* f32_data(const Tensor& t) { return static_cast<const float*>(t.data()); }

}  // namespace

void CudaOps::column_dots(Tensor& out, const Tensor& a, const Tensor& b) {
    const OpTimer timer(*this, "column_dots");
    const auto [m, n] = check_column_dots(out, a, b, Device::cuda);
    if (n == 0) return;
    column_dots_kernel<<<elementwise_blocks(n), kElementwiseThreads, 0, context().stream>>>(
        f32_data(out), f32_data(a), f32_data(b), m, n);
    CUDA_CHECK_LAUNCH();
}

void CudaOps::index_select(Tensor& dst, const Tensor& src, int dim, const std::vector<int64_t>& index) {
    const OpTimer timer(*this, "index_select");
    check_index_select(dst, src, dim, index, Device::cuda);
    const int64_t rows = dst.dim(0), cols = dst.dim(1);
    if (rows * cols == 0) return;
    // The checked index, as i32 (each entry < src.dim(dim), a tensor side), uploaded through the allocator.
    Tensor host = Tensor::empty({static_cast<int64_t>(index.size())}, DType::i32, Device::cpu);
    for (size_t k = 0; k < index.size(); ++k) host.i32()[k] = static_cast<int32_t>(index[k]);
    const Tensor device_index = host.to(Device::cuda);
    index_select_kernel<<<elementwise_blocks(rows * cols), kElementwiseThreads, 0, context().stream>>>(
        f32_data(dst), f32_data(src), static_cast<const int32_t*>(device_index.data()), dim, rows, cols,
        src.dim(1));
    CUDA_CHECK_LAUNCH();
}

void CudaOps::add_to_diagonal(Tensor& a, float s) {
    const OpTimer timer(*this, "add_to_diagonal");
    const int64_t n = require_square("add_to_diagonal", "a", a, Device::cuda);
    if (n == 0) return;
    add_to_diagonal_kernel<<<elementwise_blocks(n), kElementwiseThreads, 0, context().stream>>>(f32_data(a), s, n);
    CUDA_CHECK_LAUNCH();
}

void CudaOps::lerp_inplace(Tensor& a, const Tensor& b, float w) {
    const OpTimer timer(*this, "lerp_inplace");
    check_optimizer_tensors("lerp_inplace", Device::cuda, {{"a", &a}, {"b", &b}});
    const int64_t n = a.numel();
    if (n == 0) return;
    // The form and 1 - w are decided on the host, in float, as the CPU does.
    const bool small = std::fabs(w) < 0.5f;
    const float one_minus_w = 1.0f - w;
    lerp_kernel<<<elementwise_blocks(n), kElementwiseThreads, 0, context().stream>>>(f32_data(a), f32_data(b), w,
                                                                                     one_minus_w, small, n);
    CUDA_CHECK_LAUNCH();
}

void CudaOps::add_scaled_inplace(Tensor& a, const Tensor& b, float alpha) {
    const OpTimer timer(*this, "add_scaled_inplace");
    check_optimizer_tensors("add_scaled_inplace", Device::cuda, {{"a", &a}, {"b", &b}});
    const int64_t n = a.numel();
    if (n == 0) return;
    add_scaled_kernel<<<elementwise_blocks(n), kElementwiseThreads, 0, context().stream>>>(f32_data(a), f32_data(b),
                                                                                           alpha, n);
    CUDA_CHECK_LAUNCH();
}

void CudaOps::adam_direction(Tensor& direction, Tensor& m, Tensor& v, const Tensor& g, float beta1, float beta2,
                             float eps) {
    const OpTimer timer(*this, "adam_direction");
    check_optimizer_tensors("adam_direction", Device::cuda,
                            {{"g", &g}, {"m", &m}, {"v", &v}, {"direction", &direction}});
    const int64_t n = g.numel();
    if (n == 0) return;
    const AdamDirectionScalars s{beta1, static_cast<float>(1.0 - static_cast<double>(beta1)), beta2,
                                 static_cast<float>(1.0 - static_cast<double>(beta2)), eps};
    adam_direction_kernel<<<elementwise_blocks(n), kElementwiseThreads, 0, context().stream>>>(
        f32_data(direction), f32_data(m), f32_data(v), f32_data(g), s, n);
    CUDA_CHECK_LAUNCH();
}

}  // namespace nb::cuda

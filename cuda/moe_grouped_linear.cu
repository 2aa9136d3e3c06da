// MoE grouped linear on the CUDA backend (the reference is src/cpu/moe_grouped_linear.cpp): each expert's
// contiguous rows of the permuted activations times that expert's own weight, as one cuBLASLt GEMM per expert
// with rows, through linear.cu's GEMM (cuda/lt_gemm.h: its plan cache, its bf16 reduction rule). bf16 x, y, dy,
// dx and weights, f32 accumulation, f32 dw. For expert e with rows [b, b + m), m = off[e+1] - off[e] > 0, the
// products are linear.cu's (see there for the column-major reading) on row blocks:
//
//   forward   y[b:b+m, :] = x[b:b+m, :] W_e^T       m=out n=m k=in,   A = W_e (T), B = x rows (N), beta 0
//   dx        P[b:b+m, :] = dy[b:b+m, :] W_e         m=in  n=m k=out,  A = W_e (N), B = dy rows (N), f32 scratch P
//             then dx = bf16(f32(dx) + P) over all R rows at once (one rounding, as linear_backward)
//   dw        dW_e += dy[b:b+m, :]^T x[b:b+m, :]     m=in  n=out k=m,  A = x rows (N), B = dy rows (T), beta 1, f32
//
// An expert without rows runs no GEMM (its dW_e is left as it was). Every row belongs to one expert, so the
// forward writes all of y and P is fully written before the one add.
//
// Why per-expert GEMMs on one stream, and the host round trip: cuBLASLt 13.1 has no grouped GEMM whose group
// sizes live on the GPU, and cublasGemmGroupedBatchedEx takes its m/n/k arrays on the host too, so any cuBLAS
// grouped GEMM needs the offsets on the host. Each call therefore downloads expert_offsets (E+1 ints) and
// synchronises the stream once: 3 synchronisations per MoE layer forward and 3 in its backward. (A
// device-offset GEMM would need a hand-written kernel; the per-expert plans are cached by shape, so each new
// row count m costs one heuristic query the first time it is seen.)
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "cuda/bf16.cuh"
#include "cuda/context.h"
#include "cuda/cuda_check.h"
#include "cuda/cuda_ops.h"
#include "cuda/describe.h"
#include "cuda/lt_gemm.h"
#include "src/ops/layer_checks.h"

namespace nb::cuda {

namespace {

// The offsets on the host (a download: it synchronises the stream), checked to partition the `rows` rows.
std::vector<int32_t> host_offsets(const char* op, const Tensor& expert_offsets, int64_t rows) {
    require_cuda(op, "expert_offsets", expert_offsets, DType::i32);
    const Tensor host = expert_offsets.to(Device::cpu);
    std::vector<int32_t> off(host.i32(), host.i32() + host.numel());
    check_moe_offsets_partition(op, off.data(), static_cast<int64_t>(off.size()) - 1, rows);
    return off;
}

void require_weights(const char* op, const std::vector<const Tensor*>& w) {
    for (size_t e = 0; e < w.size(); ++e)
        require_cuda(op, ("w[" + std::to_string(e) + "]").c_str(), *w[e], DType::bf16);
}

const bf16* bf16_rows(const Tensor& t, int64_t first_row, int64_t cols) {
    return static_cast<const bf16*>(t.data()) + first_row * cols;
}

}  // namespace

void CudaOps::moe_grouped_linear_forward(Tensor& y, const Tensor& x, const std::vector<const Tensor*>& w,
                                         const Tensor& expert_offsets) {
    const OpTimer timer(*this, "moe_grouped_linear_forward");
    const char* op = "moe_grouped_linear_forward";
    const LinearDims d = check_moe_grouped_linear_forward(y, x, w, expert_offsets);
    require_cuda(op, "y", y, DType::bf16);
    require_cuda(op, "x", x, DType::bf16);
    require_weights(op, w);
    const std::vector<int32_t> off = host_offsets(op, expert_offsets, d.n);
    if (d.n == 0 || d.out == 0) return;
    if (d.in == 0) {  // an empty sum in every row
        y.zero();
        return;
    }
    for (size_t e = 0; e < w.size(); ++e) {
        const int64_t begin = off[e], rows = off[e + 1] - begin;
        if (rows == 0) continue;
        lt_gemm(context(), CUBLAS_OP_T, CUBLAS_OP_N, /*m=*/d.out, /*n=*/rows, /*k=*/d.in, w[e]->data(), d.in,
                bf16_rows(x, begin, d.in), d.in, static_cast<bf16*>(y.data()) + begin * d.out, d.out, CUDA_R_16BF,
                CUDA_R_16BF, 0.0f);
    }
}

void CudaOps::moe_grouped_linear_backward(Tensor& dx, const std::vector<Tensor*>& dw, const Tensor& dy,
                                          const Tensor& x, const std::vector<const Tensor*>& w,
                                          const Tensor& expert_offsets) {
    const OpTimer timer(*this, "moe_grouped_linear_backward");
    const char* op = "moe_grouped_linear_backward";
    const LinearDims d = check_moe_grouped_linear_backward(dx, dw, dy, x, w, expert_offsets);
    require_cuda(op, "dy", dy, DType::bf16);
    require_cuda(op, "x", x, DType::bf16);
    if (dx.defined()) require_cuda(op, "dx", dx, DType::bf16);
    require_weights(op, w);
    for (size_t e = 0; e < dw.size(); ++e)
        require_cuda(op, ("dw[" + std::to_string(e) + "]").c_str(), *dw[e], DType::f32);
    const std::vector<int32_t> off = host_offsets(op, expert_offsets, d.n);
    if (d.n == 0 || d.in == 0 || d.out == 0) return;  // every sum is empty: nothing to add
    float* product = dx.defined()
                         ? static_cast<float*>(context().scratch(static_cast<size_t>(d.n * d.in) * sizeof(float)))
                         : nullptr;
    for (size_t e = 0; e < w.size(); ++e) {
        const int64_t begin = off[e], rows = off[e + 1] - begin;
        if (rows == 0) continue;
        const bf16* dy_rows = bf16_rows(dy, begin, d.out);
        if (product)
            lt_gemm(context(), CUBLAS_OP_N, CUBLAS_OP_N, /*m=*/d.in, /*n=*/rows, /*k=*/d.out, w[e]->data(), d.in,
                    dy_rows, d.out, product + begin * d.in, d.in, CUDA_R_16BF, CUDA_R_32F, 0.0f);
        if (!dw.empty())
            lt_gemm(context(), CUBLAS_OP_N, CUBLAS_OP_T, /*m=*/d.in, /*n=*/d.out, /*k=*/rows,
                    bf16_rows(x, begin, d.in), d.in, dy_rows, d.out, dw[e]->data(), d.in, CUDA_R_16BF, CUDA_R_32F, 1.0f);
    }
    if (product) add_f32_into_bf16(context(), static_cast<bf16*>(dx.data()), product, d.n * d.in);
}

}  // namespace nb::cuda

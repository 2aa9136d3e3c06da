// RMSNorm on the CUDA backend (the f32 reference is src/cpu/rmsnorm.cpp; same math, same conventions).
//
// x, y, dx, dy: bf16 [N, d] (any leading shape, read as N rows); gain: bf16 [d]; rstd: f32 [N]; dgain: f32 [d].
// Every sum is accumulated in f32 (the CPU reference uses double; the difference is far below the bf16 rounding
// of the outputs). Reduction orders are fixed by the launch shape, which depends only on N and d, so results are
// bitwise reproducible run to run. No floating-point atomics anywhere.
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "cuda/bf16.cuh"
#include "cuda/context.h"
#include "cuda/cuda_check.h"
#include "cuda/cuda_ops.h"
#include "cuda/describe.h"
#include "src/ops/layer_checks.h"

namespace nb::cuda {

namespace {

constexpr int kWarpSize = 32;
// One warp per row: d is a few hundred to a few thousand in the models we train (576 for SmolLM-135M), so a warp
// has 18+ elements per lane and the row's reduction stays in registers and shuffles (no shared memory, no
// __syncthreads). 8 warps per block = 256 threads.
constexpr int kRowsPerBlock = 8;
constexpr int kRowThreads = kRowsPerBlock * kWarpSize;
// dgain reduction: rows are cut into fixed chunks of this many rows; one thread sums one column of one chunk.
// A constant (not derived from the GPU's SM count) so the summation order, hence the bits, are the same on every
// run and every GPU.
constexpr int kDgainRowsPerChunk = 64;
constexpr int kDgainColThreads = 128;
constexpr int kDgainReduceThreads = 256;

// Sum over the 32 lanes by an xor butterfly. Each step adds the same two operands on both partner lanes
// (a + b == b + a bitwise), so every lane ends with the identical value.
__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = kWarpSize / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

// rstd[n]  = 1 / sqrt(sum_j x[n,j]^2 / d + eps)      (f32 accumulation)
// y[n,j]   = (x[n,j] * rstd[n]) * gain[j]            (the order of HF LlamaRMSNorm and of the CPU reference)
// One warp per row; y may alias x (each element is read before it is written, by the same lane).
__global__ void rmsnorm_forward_kernel(bf16* y, float* rstd, const bf16* x, const bf16* gain, int64_t n_rows, int d,
                                       float eps) {
    const int warp = static_cast<int>(threadIdx.x) / kWarpSize, lane = static_cast<int>(threadIdx.x) % kWarpSize;
    const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + warp;
    if (row >= n_rows) return;  // the whole warp leaves together, so the shuffles below see all 32 lanes
    const bf16* xr = x + row * d;
    float ss = 0.0f;
    for (int j = lane; j < d; j += kWarpSize) {
        const float v = to_f32(xr[j]);
        ss += v * v;
    }
    ss = warp_sum(ss);
    // 1/sqrtf rather than rsqrtf: rsqrtf is ~2 ulp, this is correctly rounded twice; it costs nothing per row.
    const float r = 1.0f / sqrtf(ss / static_cast<float>(d) + eps);
    if (lane == 0) rstd[row] = r;
    bf16* yr = y + row * d;
    for (int j = lane; j < d; j += kWarpSize) yr[j] = to_bf16((to_f32(xr[j]) * r) * to_f32(gain[j]));
}

// With u = dy * gain (per element) and r = rstd[n]:
//   c        = r^2 * (sum_k u_k x_k) / d
//   dx[n,j] += r * (u_j - x_j * c)
// One warp per row; dx is read, added to in f32, and rounded once back to bf16.
__global__ void rmsnorm_backward_dx_kernel(bf16* dx, const bf16* dy, const bf16* x, const bf16* gain,
                                           const float* rstd, int64_t n_rows, int d) {
    const int warp = static_cast<int>(threadIdx.x) / kWarpSize, lane = static_cast<int>(threadIdx.x) % kWarpSize;
    const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + warp;
    if (row >= n_rows) return;
    const bf16* xr = x + row * d;
    const bf16* dyr = dy + row * d;
    float dot = 0.0f;
    for (int j = lane; j < d; j += kWarpSize) dot += (to_f32(dyr[j]) * to_f32(gain[j])) * to_f32(xr[j]);
    dot = warp_sum(dot);
    const float r = rstd[row];
    const float c = r * r * (dot / static_cast<float>(d));
    bf16* dxr = dx + row * d;
    for (int j = lane; j < d; j += kWarpSize) {
        const float u = to_f32(dyr[j]) * to_f32(gain[j]);
        dxr[j] = to_bf16(to_f32(dxr[j]) + r * (u - to_f32(xr[j]) * c));
    }
}

// dgain, step 1 of 2: partial[c, j] = sum_{n in chunk c, in row order} (dy[n,j] * x[n,j]) * rstd[n]
// Grid (num_chunks, ceil(d / kDgainColThreads)); one thread per (chunk, column). Adjacent threads read adjacent
// columns of the same row, so loads are coalesced. Every partial is written (empty chunks do not exist).
__global__ void rmsnorm_dgain_partial_kernel(float* partial, const bf16* dy, const bf16* x, const float* rstd,
                                             int64_t n_rows, int d) {
    const int64_t chunk = blockIdx.x;
    const int j = static_cast<int>(blockIdx.y) * kDgainColThreads + static_cast<int>(threadIdx.x);
    if (j >= d) return;
    const int64_t begin = chunk * kDgainRowsPerChunk;
    const int64_t end = begin + kDgainRowsPerChunk < n_rows ? begin + kDgainRowsPerChunk : n_rows;
    float acc = 0.0f;
    for (int64_t n = begin; n < end; ++n) acc += (to_f32(dy[n * d + j]) * to_f32(x[n * d + j])) * rstd[n];
    partial[chunk * d + j] = acc;
}

// dgain, step 2 of 2: dgain[j] += sum_{c = 0 .. num_chunks-1, in order} partial[c, j]
// One thread per column; its chunk loop is sequential, so the order is fixed.
__global__ void rmsnorm_dgain_reduce_kernel(float* dgain, const float* partial, int64_t num_chunks, int d) {
    const int64_t j = static_cast<int64_t>(blockIdx.x) * kDgainReduceThreads + threadIdx.x;
    if (j >= d) return;
    float s = 0.0f;
    for (int64_t c = 0; c < num_chunks; ++c) s += partial[c * d + j];
    dgain[j] += s;
}

// After the shapes (the CPU reference's checks, src/ops/layer_checks.h): the dtypes and device of this backend
// (bf16 activations and gain, f32 rstd, all on the GPU) and the kernels' limit on d.
void check_rmsnorm_types(const char* op, const Tensor& y, const Tensor& rstd, const Tensor& x, const Tensor& gain) {
    const bool types_ok = on_cuda(y, DType::bf16) && on_cuda(rstd, DType::f32) && on_cuda(x, DType::bf16) &&
                          on_cuda(gain, DType::bf16);
    if (!types_ok)
        throw std::invalid_argument(std::string(op) +
                                    ": expected x [N, d] bf16, gain [d] bf16, y/dy [N, d] bf16, rstd [N] f32, all "
                                    "on cuda; got x " +
                                    describe(x) + ", gain " + describe(gain) + ", y/dy " + describe(y) + ", rstd " +
                                    describe(rstd));
    if (gain.dim(0) > INT_MAX / 2)  // the kernels index columns with int
        throw std::invalid_argument(std::string(op) + ": d = " + std::to_string(gain.dim(0)) + " is too large");
}

}  // namespace

void CudaOps::rmsnorm_forward(Tensor& y, Tensor& rstd, const Tensor& x, const Tensor& gain, float eps) {
    const OpTimer timer(*this, "rmsnorm_forward");
    const int64_t n_rows = check_rmsnorm_forward(y, rstd, x, gain);
    check_rmsnorm_types("rmsnorm_forward", y, rstd, x, gain);
    const int d = static_cast<int>(gain.dim(0));
    if (n_rows == 0 || d == 0) return;  // nothing to compute (and a zero-sized grid is a launch error)
    const cudaStream_t stream = context().stream;
    rmsnorm_forward_kernel<<<blocks_for(n_rows, kRowsPerBlock), kRowThreads, 0, stream>>>(
        static_cast<bf16*>(y.data()), static_cast<float*>(rstd.data()), static_cast<const bf16*>(x.data()),
        static_cast<const bf16*>(gain.data()), n_rows, d, eps);
    CUDA_CHECK_LAUNCH();
}

void CudaOps::rmsnorm_backward(Tensor& dx, Tensor& dgain, const Tensor& dy, const Tensor& x, const Tensor& gain,
                               const Tensor& rstd) {
    const OpTimer timer(*this, "rmsnorm_backward");
    const int64_t n_rows = check_rmsnorm_backward(dx, dgain, dy, x, gain, rstd);
    check_rmsnorm_types("rmsnorm_backward", dy, rstd, x, gain);
    if ((dx.defined() && !on_cuda(dx, DType::bf16)) || (dgain.defined() && !on_cuda(dgain, DType::f32)))
        throw std::invalid_argument("rmsnorm_backward: expected dx like x (bf16) and dgain like gain (f32), on cuda; "
                                    "got dx " +
                                    describe(dx) + ", dgain " + describe(dgain) + ", x " + describe(x) + ", gain " +
                                    describe(gain));
    const int d = static_cast<int>(gain.dim(0));
    if (n_rows == 0 || d == 0) return;  // no rows: nothing to add to dx or dgain
    const cudaStream_t stream = context().stream;

    // Either output may be undefined (a split backward asks for each apart); each kernel is the same either way.
    if (dx.defined()) {
        rmsnorm_backward_dx_kernel<<<blocks_for(n_rows, kRowsPerBlock), kRowThreads, 0, stream>>>(
            static_cast<bf16*>(dx.data()), static_cast<const bf16*>(dy.data()), static_cast<const bf16*>(x.data()),
            static_cast<const bf16*>(gain.data()), static_cast<const float*>(rstd.data()), n_rows, d);
        CUDA_CHECK_LAUNCH();
    }
    if (!dgain.defined()) return;

    // Two kernels instead of atomics: per-chunk partial sums, then an in-order sum of the chunks. The scratch
    // buffer comes from the caching allocator, and is released (back to the cache) once enqueued work is ordered
    // on the same stream.
    const int64_t num_chunks = (n_rows + kDgainRowsPerChunk - 1) / kDgainRowsPerChunk;
    const unsigned col_blocks = blocks_for(d, kDgainColThreads);
    if (num_chunks > INT_MAX || col_blocks > 65535u)
        throw std::invalid_argument("rmsnorm_backward: " + std::to_string(n_rows) + " rows of " + std::to_string(d) +
                                    " exceed the launch limits");
    Tensor partial = Tensor::zeros({num_chunks, static_cast<int64_t>(d)}, DType::f32, Device::cuda);
    rmsnorm_dgain_partial_kernel<<<dim3(static_cast<unsigned>(num_chunks), col_blocks), kDgainColThreads, 0,
                                   stream>>>(static_cast<float*>(partial.data()), static_cast<const bf16*>(dy.data()),
                                             static_cast<const bf16*>(x.data()),
                                             static_cast<const float*>(rstd.data()), n_rows, d);
    CUDA_CHECK_LAUNCH();
    rmsnorm_dgain_reduce_kernel<<<blocks_for(d, kDgainReduceThreads), kDgainReduceThreads, 0, stream>>>(
        static_cast<float*>(dgain.data()), static_cast<const float*>(partial.data()), num_chunks, d);
    CUDA_CHECK_LAUNCH();
}

}  // namespace nb::cuda

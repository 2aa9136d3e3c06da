// Softmax cross-entropy on the CUDA backend (the f32 reference is src/cpu/cross_entropy.cpp; same math).
//
// logits, dlogits: bf16 [N, V] (any leading shape); targets: i32 with N entries, on the GPU (a host tensor is
// accepted too); loss, lse: f32 [N].
//   lse[n]  = m + log sum_j exp(logits[n,j] - m),  m = max_j logits[n,j]
//   loss[n] = lse[n] - logits[n, target[n]]
// The logits are only ever widened to f32 in registers: V can be 49152, and an f32 copy of [N, V] would be twice
// the size of the logits themselves.
//
// Targets are validated on the host (one download of N int32 and a stream synchronisation per call) before
// anything is written, as the CPU reference does: simpler than a device-side error flag, which would need the
// same synchronisation to be read. The kernels still bounds-check the target so they never read outside a row.
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda/bf16.cuh"
#include "cuda/context.h"
#include "cuda/cuda_check.h"
#include "cuda/cuda_ops.h"
#include "cuda/describe.h"
#include "src/ops/layer_checks.h"

namespace nb::cuda {

namespace {

constexpr int kWarpSize = 32;
// One block per row; 512 threads give ~96 elements per thread at V = 49152 and enough loads in flight to keep a
// row's read at memory speed, while a small vocabulary (256) still works (threads past V contribute nothing).
constexpr int kThreads = 512;
constexpr int kWarps = kThreads / kWarpSize;

// Xor butterflies: both partner lanes combine the same two operands (max and + are commutative bitwise), so
// every lane ends with the identical value.
__device__ __forceinline__ float warp_max(float v) {
    for (int offset = kWarpSize / 2; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}
__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = kWarpSize / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

// Block-wide reductions in a fixed order: each warp reduces its lanes, warp 0 reduces the kWarps partials, and the
// result is broadcast through shared memory. `scratch` holds kWarps floats plus one for the result; the trailing
// __syncthreads lets the caller reuse it right away.
__device__ float block_max(float v, float* scratch) {
    const int warp = static_cast<int>(threadIdx.x) / kWarpSize, lane = static_cast<int>(threadIdx.x) % kWarpSize;
    v = warp_max(v);
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float w = lane < kWarps ? scratch[lane] : -INFINITY;
        w = warp_max(w);
        if (lane == 0) scratch[kWarps] = w;
    }
    __syncthreads();
    const float result = scratch[kWarps];
    __syncthreads();
    return result;
}
__device__ float block_sum(float v, float* scratch) {
    const int warp = static_cast<int>(threadIdx.x) / kWarpSize, lane = static_cast<int>(threadIdx.x) % kWarpSize;
    v = warp_sum(v);
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float w = lane < kWarps ? scratch[lane] : 0.0f;
        w = warp_sum(w);
        if (lane == 0) scratch[kWarps] = w;
    }
    __syncthreads();
    const float result = scratch[kWarps];
    __syncthreads();
    return result;
}

// Per row n (one block), two passes over the row (the second mostly hits L2: a 96 KB row per block):
//   m      = max_j x[j]
//   s      = sum_j exp(x[j] - m)                      (f32; every term <= 1, the largest is exactly 1)
//   lse[n] = m + log(s)
//   loss[n] = (m - x[target]) + log(s)                (this grouping: m - x[target] is exact for bf16 inputs of
//                                                      similar size, so a small loss keeps its relative accuracy)
// A two-pass max-then-sum is used rather than an online softmax: simpler, obviously stable, and the op is
// memory-bound on a row that fits in L2.
__global__ void cross_entropy_forward_kernel(float* loss, float* lse, const bf16* logits, const int32_t* targets,
                                             int64_t vocab) {
    __shared__ float scratch[kWarps + 1];
    const int64_t n = blockIdx.x;
    const bf16* x = logits + n * vocab;
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < vocab; j += kThreads) m = fmaxf(m, to_f32(x[j]));
    m = block_max(m, scratch);
    float s = 0.0f;
    for (int64_t j = threadIdx.x; j < vocab; j += kThreads) s += expf(to_f32(x[j]) - m);
    s = block_sum(s, scratch);
    if (threadIdx.x == 0) {
        const float log_s = logf(s);
        const int64_t t = targets[n];
        lse[n] = m + log_s;
        // The host validated every target; NaN here would only mean a caller bypassed that check.
        loss[n] = (t >= 0 && t < vocab) ? (m - to_f32(x[t])) + log_s : NAN;
    }
}

// dlogits[n, j] += dloss * (exp(x[n,j] - lse[n]) - [j == target[n]])
// One block per row: the row's lse and target are loaded once; each element is read, added to in f32 and rounded
// once to bf16. A target outside [0, V) (impossible after the host check) would simply match no column.
__global__ void cross_entropy_backward_kernel(bf16* dlogits, const bf16* logits, const float* lse,
                                              const int32_t* targets, float dloss, int64_t vocab) {
    const int64_t n = blockIdx.x;
    const bf16* x = logits + n * vocab;
    bf16* dx = dlogits + n * vocab;
    const float l = lse[n];
    const int64_t t = targets[n];
    for (int64_t j = threadIdx.x; j < vocab; j += kThreads) {
        const float p = expf(to_f32(x[j]) - l);
        dx[j] = to_bf16(to_f32(dx[j]) + dloss * (j == t ? p - 1.0f : p));
    }
}

// After the CPU reference's shape checks (src/ops/layer_checks.h): this backend's dtypes and devices, and the
// kernels' limit on the rows.
void check_cross_entropy_types(const char* op, const Tensor& logits, const Tensor& targets) {
    if (!on_cuda(logits, DType::bf16) || !targets.defined() || targets.dtype() != DType::i32)
        throw std::invalid_argument(std::string(op) +
                                    ": expected logits [N, V] bf16 on cuda with V > 0 and targets [N] i32 (on cuda "
                                    "or cpu); got logits " +
                                    describe(logits) + ", targets " + describe(targets));
    if (targets.numel() > INT_MAX)  // rows are grid.x
        throw std::invalid_argument(std::string(op) + ": " + std::to_string(targets.numel()) + " rows are too many");
}

void check_row_vector_type(const char* op, const char* name, const Tensor& t, int64_t n) {
    if (!on_cuda(t, DType::f32))
        throw std::invalid_argument(std::string(op) + ": " + name + " " + describe(t) +
                                    " must be f32 on cuda with one value per row (" + std::to_string(n) + ")");
}

// The targets on the host (a copy ordered after the work already on the stream, or the host tensor itself),
// each checked to lie in [0, V).
std::vector<int32_t> checked_targets_on_host(const char* op, const Tensor& targets, int64_t vocab,
                                             cudaStream_t stream) {
    std::vector<int32_t> t(static_cast<size_t>(targets.numel()));
    if (t.empty()) return t;
    if (targets.device() == Device::cpu) {
        std::memcpy(t.data(), targets.data(), targets.bytes());
    } else {
        CUDA_CHECK(cudaMemcpyAsync(t.data(), targets.data(), targets.bytes(), cudaMemcpyDeviceToHost, stream));
        CUDA_CHECK(cudaStreamSynchronize(stream));
    }
    for (size_t n = 0; n < t.size(); ++n)
        if (t[n] < 0 || t[n] >= vocab)
            throw std::out_of_range(std::string(op) + ": target " + std::to_string(t[n]) + " at row " +
                                    std::to_string(n) + " is outside the vocabulary [0, " + std::to_string(vocab) +
                                    ")");
    return t;
}

// The targets as a device pointer: the tensor's own storage when it is on the GPU, else an upload into `holder`
// (enqueued on the stream; cudaMemcpyAsync from pageable memory returns once the data has been staged).
const int32_t* device_targets(const Tensor& targets, const std::vector<int32_t>& host, Tensor& holder,
                              cudaStream_t stream) {
    if (targets.device() == Device::cuda) return static_cast<const int32_t*>(targets.data());
    holder = Tensor::zeros({static_cast<int64_t>(host.size())}, DType::i32, Device::cuda);
    CUDA_CHECK(cudaMemcpyAsync(holder.data(), host.data(), host.size() * sizeof(int32_t), cudaMemcpyHostToDevice,
                               stream));
    return static_cast<const int32_t*>(holder.data());
}

}  // namespace

void CudaOps::cross_entropy_forward(Tensor& loss, Tensor& lse, const Tensor& logits, const Tensor& targets) {
    const OpTimer timer(*this, "cross_entropy_forward");
    const int64_t n_rows = check_cross_entropy_forward(loss, lse, logits, targets), vocab = logits.dim(-1);
    check_cross_entropy_types("cross_entropy_forward", logits, targets);
    check_row_vector_type("cross_entropy_forward", "loss", loss, n_rows);
    check_row_vector_type("cross_entropy_forward", "lse", lse, n_rows);
    const cudaStream_t stream = context().stream;
    const std::vector<int32_t> host = checked_targets_on_host("cross_entropy_forward", targets, vocab, stream);
    if (n_rows == 0) return;
    Tensor holder;
    const int32_t* t = device_targets(targets, host, holder, stream);
    cross_entropy_forward_kernel<<<static_cast<unsigned>(n_rows), kThreads, 0, stream>>>(
        static_cast<float*>(loss.data()), static_cast<float*>(lse.data()), static_cast<const bf16*>(logits.data()), t,
        vocab);
    CUDA_CHECK_LAUNCH();
}

void CudaOps::cross_entropy_backward(Tensor& dlogits, const Tensor& logits, const Tensor& lse, const Tensor& targets,
                                     float dloss) {
    const OpTimer timer(*this, "cross_entropy_backward");
    const int64_t n_rows = check_cross_entropy_backward(dlogits, logits, lse, targets), vocab = logits.dim(-1);
    check_cross_entropy_types("cross_entropy_backward", logits, targets);
    check_row_vector_type("cross_entropy_backward", "lse", lse, n_rows);
    if (!on_cuda(dlogits, DType::bf16))
        throw std::invalid_argument("cross_entropy_backward: dlogits " + describe(dlogits) +
                                    " does not match logits " + describe(logits));
    const cudaStream_t stream = context().stream;
    const std::vector<int32_t> host = checked_targets_on_host("cross_entropy_backward", targets, vocab, stream);
    if (n_rows == 0) return;
    Tensor holder;
    const int32_t* t = device_targets(targets, host, holder, stream);
    cross_entropy_backward_kernel<<<static_cast<unsigned>(n_rows), kThreads, 0, stream>>>(
        static_cast<bf16*>(dlogits.data()), static_cast<const bf16*>(logits.data()),
        static_cast<const float*>(lse.data()), t, dloss, vocab);
    CUDA_CHECK_LAUNCH();
}

}  // namespace nb::cuda

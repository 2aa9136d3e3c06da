// The Switch/GShard load-balancing loss on the CUDA backend (the reference is src/cpu/moe_aux_loss.cpp):
//
//   L_aux = coeff E sum_i f_i P_i,   f_i = (pairs routed to i) / R  (R = N k),   P_i = (1/N) sum_n p[n,i]
//   dL_aux / dp[n,i] = dloss coeff E f_i / N                          (f_i is a count: no gradient)
//
// probs, dprobs: f32 [N,E]; expert_offsets: i32 [E+1] on the GPU (f_i is read there: no host round trip);
// loss: f32 [1]. Sums in double, in a fixed order without atomics: the column sums over tokens in chunks of
// kTokensPerChunk tokens (each chunk's sum in token order), then the chunks in order, then the experts in order.
// Against the CPU's single pass over the tokens only the grouping of a double sum changes (~1e-16 relative),
// far below the f32 rounding of the result.
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
#include "cuda/grid_stride.cuh"
#include "src/ops/layer_checks.h"

namespace nb::cuda {

namespace {

constexpr unsigned kThreads = 256;
constexpr int64_t kTokensPerChunk = 256;

// f_i = (off[i+1] - off[i]) / R with R = off[E]; 0 when there are no pairs (the CPU's routed_fraction).
__device__ __forceinline__ double routed_fraction(const int32_t* off, int64_t experts, int64_t i) {
    const double pairs = off[experts];
    return pairs > 0 ? (off[i + 1] - off[i]) / pairs : 0.0;
}

// partial[c, i] = sum over the tokens n of chunk c, ascending, of p[n, i]   (double). Block c, threads over i.
__global__ void column_partial_sums(double* partial, const float* probs, int64_t tokens, int64_t experts) {
    const int64_t chunk = blockIdx.x, first = chunk * kTokensPerChunk;
    const int64_t last = first + kTokensPerChunk < tokens ? first + kTokensPerChunk : tokens;
    for (int64_t i = threadIdx.x; i < experts; i += kThreads) {
        double s = 0.0;
        for (int64_t n = first; n < last; ++n) s += probs[n * experts + i];
        partial[chunk * experts + i] = s;
    }
}

// One block: term_i = f_i ((sum over chunks c ascending of partial[c, i]) / N), then thread 0:
// loss = f32(coeff E sum_i term_i), i ascending. `term` is global scratch [E]: __syncthreads orders the block's
// global writes before thread 0 reads them.
__global__ void aux_loss_total(float* loss, double* term, const double* partial, const int32_t* off,
                               int64_t chunks, int64_t tokens, int64_t experts, float coeff) {
    for (int64_t i = threadIdx.x; i < experts; i += kThreads) {
        double column = 0.0;
        for (int64_t c = 0; c < chunks; ++c) column += partial[c * experts + i];
        term[i] = tokens > 0 ? routed_fraction(off, experts, i) * (column / tokens) : 0.0;
    }
    __syncthreads();
    if (threadIdx.x != 0) return;
    double total = 0.0;
    for (int64_t i = 0; i < experts; ++i) total += term[i];
    loss[0] = static_cast<float>(static_cast<double>(coeff) * experts * total);
}

// dprobs[n, i] += f32(dloss coeff E f_i / N)   (the CPU's expression, evaluated left to right in double)
__global__ void aux_loss_backward_kernel(float* dprobs, const int32_t* off, int64_t tokens, int64_t experts,
                                         float coeff, float dloss) {
    const int64_t count = tokens * experts;
    for (int64_t idx = first_element(); idx < count; idx += element_stride()) {
        const int64_t i = idx % experts;
        const float per_expert = static_cast<float>(static_cast<double>(dloss) * coeff * experts *
                                                    routed_fraction(off, experts, i) / tokens);
        dprobs[idx] += per_expert;
    }
}

}  // namespace

void CudaOps::moe_aux_loss_forward(Tensor& loss, const Tensor& probs, const Tensor& expert_offsets, float coeff) {
    const OpTimer timer(*this, "moe_aux_loss_forward");
    const MoeRouterDims d = check_moe_aux_loss_forward(loss, probs, expert_offsets);
    const char* op = "moe_aux_loss_forward";
    require_cuda(op, "loss", loss, DType::f32);
    require_cuda(op, "probs", probs, DType::f32);
    require_cuda(op, "expert_offsets", expert_offsets, DType::i32);
    const int64_t chunks = (d.n + kTokensPerChunk - 1) / kTokensPerChunk;
    if (chunks >= INT_MAX) throw std::invalid_argument(std::string(op) + ": too many tokens for the grid");
    // Scratch: the chunks' partial sums [chunks, E], then the per-expert terms [E].
    auto* partial = static_cast<double*>(context().scratch(static_cast<size_t>((chunks + 1) * d.e) * sizeof(double)));
    double* term = partial + chunks * d.e;
    cudaStream_t stream = context().stream;
    if (chunks > 0) {
        column_partial_sums<<<static_cast<unsigned>(chunks), kThreads, 0, stream>>>(
            partial, static_cast<const float*>(probs.data()), d.n, d.e);
        CUDA_CHECK_LAUNCH();
    }
    aux_loss_total<<<1, kThreads, 0, stream>>>(static_cast<float*>(loss.data()), term, partial,
                                               static_cast<const int32_t*>(expert_offsets.data()), chunks, d.n, d.e,
                                               coeff);
    CUDA_CHECK_LAUNCH();
}

void CudaOps::moe_aux_loss_backward(Tensor& dprobs, const Tensor& expert_offsets, float coeff, float dloss) {
    const OpTimer timer(*this, "moe_aux_loss_backward");
    const MoeRouterDims d = check_moe_aux_loss_backward(dprobs, expert_offsets);
    require_cuda("moe_aux_loss_backward", "dprobs", dprobs, DType::f32);
    require_cuda("moe_aux_loss_backward", "expert_offsets", expert_offsets, DType::i32);
    if (d.n == 0) return;
    aux_loss_backward_kernel<<<elementwise_blocks(d.n * d.e), kElementwiseThreads, 0, context().stream>>>(
        static_cast<float*>(dprobs.data()), static_cast<const int32_t*>(expert_offsets.data()), d.n, d.e, coeff, dloss);
    CUDA_CHECK_LAUNCH();
}

}  // namespace nb::cuda

// MoE dropless dispatch on the CUDA backend: the plan and the permutation of the token rows into expert order
// (the reference is src/cpu/moe_dispatch.cpp, which gives the same plan bit for bit).
//
// topk_expert, pair_of_row, row_of_pair [R] and expert_offsets [E+1]: i32 on the GPU; x, xp, dx, dxp: bf16.
//
// The plan is the CPU's stable counting sort, computed in chunks of kChunk consecutive pairs without atomics:
//   count[c, e] = pairs of chunk c routed to e                                 (count_chunks: block c)
//   expert_offsets[e+1] = sum over chunks c of count[c, e]; then the prefix sum over e (expert_offsets[E] = R)
//   base[c, e] = expert_offsets[e] + sum over chunks c' < c of count[c', e]    (plan_offsets: one block)
//   pair p = c kChunk + t, expert e:  rank = #{t' < t in chunk c : expert e}
//                                     row_of_pair[p] = base[c, e] + rank ; pair_of_row[row] = p   (assign_rows)
// So within an expert the rows follow increasing p = (token, slot), exactly as the CPU's sequential pass.
// A pair routed outside [0, E) (never from the router) is not counted: it gets row -1, the rows it leaves
// unfilled at the end get pair -1, and expert_offsets[E] < R, which the grouped linear's host-side partition
// check reports; the permutation kernels skip -1 so they never read out of bounds.
//
// Permute:   xp[r, :] = x[pair_of_row[r] / k, :]                                     (a bf16 copy: exact)
// Backward:  dx[n, :] = bf16(f32(dx[n, :]) + sum_{j = 0..k-1} dxp[row_of_pair[n k + j], :])   slot order, f32,
//            one rounding
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

constexpr unsigned kChunk = 256;        // pairs per chunk = threads per block of count_chunks and assign_rows
constexpr unsigned kPlanThreads = 256;  // the one block of plan_offsets

// Loads chunk c's experts into shared memory (-1 past the last pair); returns this thread's pair index.
__device__ __forceinline__ int64_t load_chunk(int32_t* chunk_experts, const int32_t* expert, int64_t pairs) {
    const int64_t p = static_cast<int64_t>(blockIdx.x) * kChunk + threadIdx.x;
    chunk_experts[threadIdx.x] = p < pairs ? expert[p] : -1;
    __syncthreads();
    return p;
}

// count[c, e] for chunk c = blockIdx.x: threads over experts, each scanning the chunk's (at most kChunk) pairs.
__global__ void count_chunks(int32_t* count, const int32_t* expert, int64_t pairs, int64_t experts) {
    __shared__ int32_t chunk_experts[kChunk];
    load_chunk(chunk_experts, expert, pairs);
    for (int64_t e = threadIdx.x; e < experts; e += kChunk) {
        int32_t c = 0;
        for (unsigned t = 0; t < kChunk; ++t) c += chunk_experts[t] == e;  // -1 (past the end) matches no e
        count[static_cast<int64_t>(blockIdx.x) * experts + e] = c;
    }
}

// One block. Totals per expert into off[e+1]; thread 0 the prefix sum over e; then count[c, e] is overwritten
// with base[c, e]. Each step's global writes are ordered before the next step's reads by __syncthreads.
__global__ void plan_offsets(int32_t* off, int32_t* count_then_base, int32_t* pair_of_row, int64_t chunks,
                             int64_t pairs, int64_t experts) {
    for (int64_t e = threadIdx.x; e < experts; e += kPlanThreads) {
        int32_t total = 0;
        for (int64_t c = 0; c < chunks; ++c) total += count_then_base[c * experts + e];
        off[e + 1] = total;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        off[0] = 0;
        for (int64_t e = 0; e < experts; ++e) off[e + 1] += off[e];
    }
    __syncthreads();
    for (int64_t e = threadIdx.x; e < experts; e += kPlanThreads) {
        int32_t base = off[e];
        for (int64_t c = 0; c < chunks; ++c) {
            const int32_t n = count_then_base[c * experts + e];
            count_then_base[c * experts + e] = base;
            base += n;
        }
    }
    for (int64_t r = off[experts] + threadIdx.x; r < pairs; r += kPlanThreads) pair_of_row[r] = -1;
}

// Pair p = c kChunk + t (c = blockIdx.x, t = threadIdx.x): its row is its expert's base in chunk c plus the
// number of earlier pairs of the chunk routed to the same expert.
__global__ void assign_rows(int32_t* row_of_pair, int32_t* pair_of_row, const int32_t* base, const int32_t* expert,
                            int64_t pairs, int64_t experts) {
    __shared__ int32_t chunk_experts[kChunk];
    const int64_t p = load_chunk(chunk_experts, expert, pairs);
    if (p >= pairs) return;
    const int32_t e = chunk_experts[threadIdx.x];
    if (e < 0 || e >= experts) {
        row_of_pair[p] = -1;
        return;
    }
    int32_t rank = 0;
    for (unsigned t = 0; t < threadIdx.x; ++t) rank += chunk_experts[t] == e;
    const int32_t row = base[static_cast<int64_t>(blockIdx.x) * experts + e] + rank;
    row_of_pair[p] = row;
    pair_of_row[row] = static_cast<int32_t>(p);
}

// xp[r, c] = x[pair_of_row[r] / k, c], 0 for an unfilled row (pair -1).
__global__ void permute_forward_kernel(bf16* xp, const bf16* x, const int32_t* pair_of_row, int64_t rows, int64_t k,
                                       int64_t d) {
    const int64_t count = rows * d;
    for (int64_t idx = first_element(); idx < count; idx += element_stride()) {
        const int64_t r = idx / d, c = idx % d;
        const int32_t pair = pair_of_row[r];
        xp[idx] = pair >= 0 ? x[(pair / k) * d + c] : to_bf16(0.0f);
    }
}

// dx[n, c] = bf16(f32(dx[n, c]) + dxp[row_0, c] + ... + dxp[row_{k-1}, c]), row_j = row_of_pair[n k + j] (f32 sum
// in slot order; a row -1 adds nothing).
__global__ void permute_backward_kernel(bf16* dx, const bf16* dxp, const int32_t* row_of_pair, int64_t tokens,
                                        int64_t k, int64_t d) {
    const int64_t count = tokens * d;
    for (int64_t idx = first_element(); idx < count; idx += element_stride()) {
        const int64_t n = idx / d, c = idx % d;
        float acc = to_f32(dx[idx]);
        for (int64_t j = 0; j < k; ++j) {
            const int32_t row = row_of_pair[n * k + j];
            if (row >= 0) acc += to_f32(dxp[static_cast<int64_t>(row) * d + c]);
        }
        dx[idx] = to_bf16(acc);
    }
}

}  // namespace

void CudaOps::moe_dispatch_plan(Tensor& pair_of_row, Tensor& row_of_pair, Tensor& expert_offsets,
                                const Tensor& topk_expert) {
    const OpTimer timer(*this, "moe_dispatch_plan");
    const MoeRouterDims d = check_moe_dispatch_plan(pair_of_row, row_of_pair, expert_offsets, topk_expert);
    const char* op = "moe_dispatch_plan";
    require_cuda(op, "pair_of_row", pair_of_row, DType::i32);
    require_cuda(op, "row_of_pair", row_of_pair, DType::i32);
    require_cuda(op, "expert_offsets", expert_offsets, DType::i32);
    require_cuda(op, "topk_expert", topk_expert, DType::i32);
    const int64_t pairs = d.n * d.k, chunks = (pairs + kChunk - 1) / kChunk;
    if (pairs > INT32_MAX) throw std::invalid_argument(std::string(op) + ": more pairs than an i32 row index holds");
    auto* count = static_cast<int32_t*>(context().scratch(static_cast<size_t>((chunks > 0 ? chunks : 1) * d.e) *
                                                          sizeof(int32_t)));
    const auto* expert = static_cast<const int32_t*>(topk_expert.data());
    auto* rows = static_cast<int32_t*>(row_of_pair.data());
    auto* pairs_of_rows = static_cast<int32_t*>(pair_of_row.data());
    cudaStream_t stream = context().stream;
    if (chunks > 0) {
        count_chunks<<<static_cast<unsigned>(chunks), kChunk, 0, stream>>>(count, expert, pairs, d.e);
        CUDA_CHECK_LAUNCH();
    }
    plan_offsets<<<1, kPlanThreads, 0, stream>>>(static_cast<int32_t*>(expert_offsets.data()), count, pairs_of_rows,
                                                 chunks, pairs, d.e);
    CUDA_CHECK_LAUNCH();
    if (chunks > 0) {
        assign_rows<<<static_cast<unsigned>(chunks), kChunk, 0, stream>>>(rows, pairs_of_rows, count, expert, pairs,
                                                                         d.e);
        CUDA_CHECK_LAUNCH();
    }
}

void CudaOps::moe_permute_forward(Tensor& xp, const Tensor& x, const Tensor& pair_of_row) {
    const OpTimer timer(*this, "moe_permute_forward");
    const MoeRowDims d = check_moe_permute_forward(xp, x, pair_of_row);
    require_cuda("moe_permute_forward", "xp", xp, DType::bf16);
    require_cuda("moe_permute_forward", "x", x, DType::bf16);
    require_cuda("moe_permute_forward", "pair_of_row", pair_of_row, DType::i32);
    const int64_t rows = d.n * d.k;
    if (rows * d.d == 0) return;
    permute_forward_kernel<<<elementwise_blocks(rows * d.d), kElementwiseThreads, 0, context().stream>>>(
        static_cast<bf16*>(xp.data()), static_cast<const bf16*>(x.data()),
        static_cast<const int32_t*>(pair_of_row.data()), rows, d.k, d.d);
    CUDA_CHECK_LAUNCH();
}

void CudaOps::moe_permute_backward(Tensor& dx, const Tensor& dxp, const Tensor& row_of_pair) {
    const OpTimer timer(*this, "moe_permute_backward");
    const MoeRowDims d = check_moe_permute_backward(dx, dxp, row_of_pair);
    require_cuda("moe_permute_backward", "dx", dx, DType::bf16);
    require_cuda("moe_permute_backward", "dxp", dxp, DType::bf16);
    require_cuda("moe_permute_backward", "row_of_pair", row_of_pair, DType::i32);
    if (d.n * d.d == 0) return;
    permute_backward_kernel<<<elementwise_blocks(d.n * d.d), kElementwiseThreads, 0, context().stream>>>(
        static_cast<bf16*>(dx.data()), static_cast<const bf16*>(dxp.data()),
        static_cast<const int32_t*>(row_of_pair.data()), d.n, d.k, d.d);
    CUDA_CHECK_LAUNCH();
}

}  // namespace nb::cuda

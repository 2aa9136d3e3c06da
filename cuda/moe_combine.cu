// MoE unpermute and combine on the CUDA backend (the reference is src/cpu/moe_combine.cpp; same math):
//
//   y[n, c] = bf16(sum_{j = 0..k-1} gate[n, j] expert_out[row_of_pair[n k + j], c])    f32, slot order, from 0
// Backward, pair p = n k + j with row = row_of_pair[p]:
//   dexpert_out[row, c] = bf16(f32(dexpert_out[row, c]) + gate[p] dy[n, c])            (+=, one rounding)
//   dgate[p]           += f32(sum_c dy[n, c] expert_out[row, c])                       (the dot in double)
//
// y, dy, expert_out, dexpert_out: bf16; topk_gate, dgate: f32 [N,k]; row_of_pair: i32 [N k]. Every row belongs
// to exactly one pair (row_of_pair is a bijection), so the backward's scatter into dexpert_out never has two
// writers. A row -1 (a pair the plan could not place) contributes nothing.
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

constexpr int kWarpSize = 32;
constexpr unsigned kBackwardThreads = 256;  // 8 warps: one pair each
constexpr unsigned kPairsPerBlock = kBackwardThreads / kWarpSize;

// One thread per (n, c).
__global__ void combine_forward_kernel(bf16* y, const bf16* expert_out, const float* gate, const int32_t* row_of_pair,
                                       int64_t tokens, int64_t k, int64_t d) {
    const int64_t count = tokens * d;
    for (int64_t idx = first_element(); idx < count; idx += element_stride()) {
        const int64_t n = idx / d, c = idx % d;
        float acc = 0.0f;
        for (int64_t j = 0; j < k; ++j) {
            const int32_t row = row_of_pair[n * k + j];
            if (row >= 0) acc += gate[n * k + j] * to_f32(expert_out[static_cast<int64_t>(row) * d + c]);
        }
        y[idx] = to_bf16(acc);
    }
}

// Xor butterfly over the warp in double: both partners add the same two operands, so every lane ends with the
// same, fixed-order sum.
__device__ __forceinline__ double warp_sum(double v) {
    for (int offset = kWarpSize / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

// One warp per pair p: lane l takes the columns c = l, l + 32, ... (coalesced), adds its share of the dot in
// double in c order, then the butterfly; lane 0 adds the dot to dgate[p].
__global__ void combine_backward_kernel(bf16* dexpert_out, float* dgate, const bf16* dy, const bf16* expert_out,
                                        const float* gate, const int32_t* row_of_pair, int64_t pairs, int64_t k,
                                        int64_t d) {
    const int64_t p = static_cast<int64_t>(blockIdx.x) * kPairsPerBlock + threadIdx.x / kWarpSize;
    const int lane = static_cast<int>(threadIdx.x % kWarpSize);
    if (p >= pairs) return;  // the whole warp: p is the same for its 32 lanes
    const int32_t row = row_of_pair[p];
    if (row < 0) return;
    const int64_t n = p / k;
    const float g = gate[p];
    const bf16* go = dy + n * d;
    const bf16* out = expert_out + static_cast<int64_t>(row) * d;
    bf16* dout = dexpert_out + static_cast<int64_t>(row) * d;
    double dot = 0.0;
    for (int64_t c = lane; c < d; c += kWarpSize) {
        const float gc = to_f32(go[c]);
        dout[c] = to_bf16(to_f32(dout[c]) + g * gc);
        dot += static_cast<double>(gc) * to_f32(out[c]);
    }
    dot = warp_sum(dot);
    if (lane == 0) dgate[p] += static_cast<float>(dot);
}

}  // namespace

void CudaOps::moe_combine_forward(Tensor& y, const Tensor& expert_out, const Tensor& topk_gate,
                                  const Tensor& row_of_pair) {
    const OpTimer timer(*this, "moe_combine_forward");
    const MoeRowDims d = check_moe_combine_forward(y, expert_out, topk_gate, row_of_pair);
    const char* op = "moe_combine_forward";
    require_cuda(op, "y", y, DType::bf16);
    require_cuda(op, "expert_out", expert_out, DType::bf16);
    require_cuda(op, "topk_gate", topk_gate, DType::f32);
    require_cuda(op, "row_of_pair", row_of_pair, DType::i32);
    if (d.n * d.d == 0) return;
    combine_forward_kernel<<<elementwise_blocks(d.n * d.d), kElementwiseThreads, 0, context().stream>>>(
        static_cast<bf16*>(y.data()), static_cast<const bf16*>(expert_out.data()),
        static_cast<const float*>(topk_gate.data()), static_cast<const int32_t*>(row_of_pair.data()), d.n, d.k, d.d);
    CUDA_CHECK_LAUNCH();
}

void CudaOps::moe_combine_backward(Tensor& dexpert_out, Tensor& dgate, const Tensor& dy, const Tensor& expert_out,
                                   const Tensor& topk_gate, const Tensor& row_of_pair) {
    const OpTimer timer(*this, "moe_combine_backward");
    const MoeRowDims d = check_moe_combine_backward(dexpert_out, dgate, dy, expert_out, topk_gate, row_of_pair);
    const char* op = "moe_combine_backward";
    require_cuda(op, "dexpert_out", dexpert_out, DType::bf16);
    require_cuda(op, "dgate", dgate, DType::f32);
    require_cuda(op, "dy", dy, DType::bf16);
    require_cuda(op, "expert_out", expert_out, DType::bf16);
    require_cuda(op, "topk_gate", topk_gate, DType::f32);
    require_cuda(op, "row_of_pair", row_of_pair, DType::i32);
    const int64_t pairs = d.n * d.k, blocks = (pairs + kPairsPerBlock - 1) / kPairsPerBlock;
    if (pairs == 0) return;
    if (blocks >= INT_MAX) throw std::invalid_argument(std::string(op) + ": too many pairs for the grid");
    combine_backward_kernel<<<static_cast<unsigned>(blocks), kBackwardThreads, 0, context().stream>>>(
        static_cast<bf16*>(dexpert_out.data()), static_cast<float*>(dgate.data()), static_cast<const bf16*>(dy.data()),
        static_cast<const bf16*>(expert_out.data()), static_cast<const float*>(topk_gate.data()),
        static_cast<const int32_t*>(row_of_pair.data()), pairs, d.k, d.d);
    CUDA_CHECK_LAUNCH();
}

}  // namespace nb::cuda

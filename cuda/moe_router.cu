// MoE router on the CUDA backend: softmax over the experts, top-k selection (optionally biased) and the gates
// (the f32 reference is src/cpu/moe_router.cpp; same math, same order of every sum).
//
// logits, dlogits: bf16 [N,E] (the router's linear output and its gradient); probs, dprobs: f32 [N,E];
// topk_expert: i32 [N,k]; topk_gate, dgate: f32 [N,k]; expert_bias: f32 [E] or undefined.
//
// One thread per token, which runs the CPU's loops as written: E and k are small (E <= a few hundred, k <= 8
// from the command line) next to the GEMMs around the router, and a sequential pass keeps every sum in the
// CPU's order and the tie rule the CPU's by construction. The softmax is f32 with the sum in double, so the
// probabilities differ from the CPU's only by expf's ulps (CUDA's expf: 2 ulps at most).
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

constexpr unsigned kThreads = 128;  // tokens per block

// Whether expert i is among the first j picks of this token (the CPU's `taken`, as a scan of k <= 8 entries).
__device__ __forceinline__ bool already_chosen(const int32_t* chosen, int64_t j, int64_t i) {
    for (int64_t l = 0; l < j; ++l)
        if (chosen[l] == i) return true;
    return false;
}

// Per token n:
//   zmax = max_i z_i ; p_i = expf(z_i - zmax) (f32) ; total = sum_i p_i (double, i ascending) ; p_i = f32(p_i/total)
//   for j = 0..k-1: e_j = the first i (ascending) not yet chosen with the largest score_i = p_i + b_i, compared with
//   a strict > so equal scores keep the lower index; gate_j = p_{e_j}; S = sum_j p_{e_j} (double, j ascending)
//   renorm: gate_j = f32(gate_j / S)
__global__ void router_forward_kernel(float* probs, int32_t* topk_expert, float* topk_gate, const bf16* logits,
                                      const float* bias, int64_t tokens, int64_t experts, int64_t k, bool renorm) {
    const int64_t n = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
    if (n >= tokens) return;
    const bf16* z = logits + n * experts;
    float* p = probs + n * experts;
    float zmax = to_f32(z[0]);
    for (int64_t i = 1; i < experts; ++i) zmax = fmaxf(zmax, to_f32(z[i]));
    double total = 0.0;
    for (int64_t i = 0; i < experts; ++i) {
        p[i] = expf(to_f32(z[i]) - zmax);
        total += p[i];
    }
    for (int64_t i = 0; i < experts; ++i) p[i] = static_cast<float>(p[i] / total);

    int32_t* chosen = topk_expert + n * k;
    float* gate = topk_gate + n * k;
    double chosen_sum = 0.0;
    for (int64_t j = 0; j < k; ++j) {
        int64_t best = -1;
        float best_score = 0.0f;
        for (int64_t i = 0; i < experts; ++i) {
            if (already_chosen(chosen, j, i)) continue;
            const float score = bias ? p[i] + bias[i] : p[i];
            if (best < 0 || score > best_score) {
                best = i;
                best_score = score;
            }
        }
        chosen[j] = static_cast<int32_t>(best);
        gate[j] = p[best];
        chosen_sum += p[best];
    }
    if (renorm)
        for (int64_t j = 0; j < k; ++j) gate[j] = static_cast<float>(gate[j] / chosen_sum);
}

// Per token n, dp (double, in the scratch row dp_row [E]):
//   dp_i = dprobs_i (or 0)
//   renorm:  S = sum_j p_{e_j}, dot = sum_j dgate_j gate_j (both double, j ascending);
//            dp_{e_j} += (dgate_j - dot) / S
//   else:    dp_{e_j} += dgate_j
//   p_dot_dp = sum_i p_i dp_i (double, i ascending)
//   dlogits_i = bf16(f32(dlogits_i) + f32(p_i (dp_i - p_dot_dp)))        (+=, one bf16 rounding)
__global__ void router_backward_kernel(bf16* dlogits, double* dp_scratch, const float* dprobs, const float* dgate,
                                       const float* probs, const int32_t* topk_expert, const float* topk_gate,
                                       int64_t tokens, int64_t experts, int64_t k, bool renorm) {
    const int64_t n = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
    if (n >= tokens) return;
    const float* p = probs + n * experts;
    const int32_t* chosen = topk_expert + n * k;
    const float* gate = topk_gate + n * k;
    const float* dg = dgate + n * k;
    double* dp = dp_scratch + n * experts;
    for (int64_t i = 0; i < experts; ++i) dp[i] = dprobs ? dprobs[n * experts + i] : 0.0;
    if (renorm) {
        double chosen_sum = 0.0, dot = 0.0;
        for (int64_t j = 0; j < k; ++j) {
            chosen_sum += p[chosen[j]];
            dot += static_cast<double>(dg[j]) * gate[j];
        }
        for (int64_t j = 0; j < k; ++j) dp[chosen[j]] += (dg[j] - dot) / chosen_sum;
    } else {
        for (int64_t j = 0; j < k; ++j) dp[chosen[j]] += dg[j];
    }
    double p_dot_dp = 0.0;
    for (int64_t i = 0; i < experts; ++i) p_dot_dp += p[i] * dp[i];
    bf16* dz = dlogits + n * experts;
    for (int64_t i = 0; i < experts; ++i)
        dz[i] = to_bf16(to_f32(dz[i]) + static_cast<float>(p[i] * (dp[i] - p_dot_dp)));
}

unsigned token_blocks(const char* op, int64_t tokens) {
    if (tokens / kThreads >= INT_MAX)
        throw std::invalid_argument(std::string(op) + ": " + std::to_string(tokens) + " tokens exceed the grid limit");
    return blocks_for(tokens, kThreads);
}

}  // namespace

void CudaOps::moe_router_forward(Tensor& probs, Tensor& topk_expert, Tensor& topk_gate, const Tensor& logits,
                                 const Tensor& expert_bias, bool renorm) {
    const OpTimer timer(*this, "moe_router_forward");
    const MoeRouterDims d = check_moe_router_forward(probs, topk_expert, topk_gate, logits, expert_bias);
    const char* op = "moe_router_forward";
    require_cuda(op, "probs", probs, DType::f32);
    require_cuda(op, "topk_expert", topk_expert, DType::i32);
    require_cuda(op, "topk_gate", topk_gate, DType::f32);
    require_cuda(op, "logits", logits, DType::bf16);
    if (expert_bias.defined()) require_cuda(op, "expert_bias", expert_bias, DType::f32);
    if (d.n == 0) return;
    router_forward_kernel<<<token_blocks(op, d.n), kThreads, 0, context().stream>>>(
        static_cast<float*>(probs.data()), static_cast<int32_t*>(topk_expert.data()),
        static_cast<float*>(topk_gate.data()), static_cast<const bf16*>(logits.data()),
        expert_bias.defined() ? static_cast<const float*>(expert_bias.data()) : nullptr, d.n, d.e, d.k, renorm);
    CUDA_CHECK_LAUNCH();
}

void CudaOps::moe_router_backward(Tensor& dlogits, const Tensor& dprobs, const Tensor& dgate, const Tensor& probs,
                                  const Tensor& topk_expert, const Tensor& topk_gate, bool renorm) {
    const OpTimer timer(*this, "moe_router_backward");
    const MoeRouterDims d = check_moe_router_backward(dlogits, dprobs, dgate, probs, topk_expert, topk_gate);
    const char* op = "moe_router_backward";
    require_cuda(op, "dlogits", dlogits, DType::bf16);
    if (dprobs.defined()) require_cuda(op, "dprobs", dprobs, DType::f32);
    require_cuda(op, "dgate", dgate, DType::f32);
    require_cuda(op, "probs", probs, DType::f32);
    require_cuda(op, "topk_expert", topk_expert, DType::i32);
    require_cuda(op, "topk_gate", topk_gate, DType::f32);
    if (d.n == 0) return;
    auto* dp = static_cast<double*>(context().scratch(static_cast<size_t>(d.n * d.e) * sizeof(double)));
    router_backward_kernel<<<token_blocks(op, d.n), kThreads, 0, context().stream>>>(
        static_cast<bf16*>(dlogits.data()), dp,
        dprobs.defined() ? static_cast<const float*>(dprobs.data()) : nullptr, static_cast<const float*>(dgate.data()),
        static_cast<const float*>(probs.data()), static_cast<const int32_t*>(topk_expert.data()),
        static_cast<const float*>(topk_gate.data()), d.n, d.e, d.k, renorm);
    CUDA_CHECK_LAUNCH();
}

}  // namespace nb::cuda

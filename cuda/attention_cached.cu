// CudaOps::attention_forward_cached: the attention of decoding with a KV cache (model/kv_cache.h). The f32
// reference is src/cpu/attention.cpp's attention_forward_cached; the math is the same:
//
//   q/out [B,Tq,H,hd] bf16, k/v [B,Tk,KV,hd] bf16 (the cache's first Tk positions), Tk >= Tq;
//   query i stands at position p = Tk - Tq + i and sees keys j = 0 .. p (query head h reads kv head h / (H/KV)):
//   s_j = scale q.k_j (scale = 1/sqrt(hd)), P = softmax(s), out = sum_j P_j v_j
//
// Why a plain kernel and not the FlashAttention tiles of attention_kernels.cuh: a decode step has one query per
// head, so the work is a dot product per cached key and one weighted sum; what matters is reading the cache once.
// One block per (b, h, query): its threads take the keys in turn (scores into shared memory, f32), a block-wide
// max and sum (a fixed tree: the same bits every run), then each thread owns output columns and sums over the keys
// in order. Generation only: there is no backward.
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <initializer_list>
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

constexpr int kThreads = 128;
constexpr int64_t kMaxKeys = 12 * 1024;  // 48 KiB of f32 scores: the default shared memory, no opt-in

struct CachedDims {
    int64_t B, Tq, Tk, H, KV, hd;
};

// Tree reduction over the block (max when take_max, else sum); every thread gets the result.
__device__ float block_reduce(float v, bool take_max, float* scratch) {
    scratch[threadIdx.x] = v;
    __syncthreads();
    for (int stride = kThreads / 2; stride > 0; stride /= 2) {
        if (threadIdx.x < stride) {
            const float o = scratch[threadIdx.x + stride];
            scratch[threadIdx.x] = take_max ? fmaxf(scratch[threadIdx.x], o) : scratch[threadIdx.x] + o;
        }
        __syncthreads();
    }
    const float r = scratch[0];
    __syncthreads();
    return r;
}

__global__ void attention_cached_kernel(bf16* out, const bf16* q, const bf16* k, const bf16* v, CachedDims d,
                                        float scale) {
    extern __shared__ float scores[];  // [keys]
    __shared__ float scratch[kThreads];
    const int64_t i = blockIdx.x % d.Tq, h = (blockIdx.x / d.Tq) % d.H, b = blockIdx.x / (d.Tq * d.H);
    const int64_t keys = d.Tk - d.Tq + i + 1;
    const int64_t kvh = h / (d.H / d.KV);
    const bf16* qrow = q + ((b * d.Tq + i) * d.H + h) * d.hd;
    auto key_row = [&](const bf16* base, int64_t j) { return base + ((b * d.Tk + j) * d.KV + kvh) * d.hd; };

    float local_max = -INFINITY;
    for (int64_t j = threadIdx.x; j < keys; j += kThreads) {
        const bf16* kr = key_row(k, j);
        float s = 0.0f;
        for (int64_t c = 0; c < d.hd; ++c) s += to_f32(qrow[c]) * to_f32(kr[c]);
        scores[j] = s * scale;
        local_max = fmaxf(local_max, scores[j]);
    }
    const float mx = block_reduce(local_max, true, scratch);
    float local_sum = 0.0f;
    for (int64_t j = threadIdx.x; j < keys; j += kThreads) {
        scores[j] = expf(scores[j] - mx);
        local_sum += scores[j];
    }
    const float inv = 1.0f / block_reduce(local_sum, false, scratch);  // also the barrier before scores are read
    bf16* orow = out + ((b * d.Tq + i) * d.H + h) * d.hd;
    for (int64_t c = threadIdx.x; c < d.hd; c += kThreads) {
        float acc = 0.0f;
        for (int64_t j = 0; j < keys; ++j) acc += scores[j] * to_f32(key_row(v, j)[c]);
        orow[c] = to_bf16(acc * inv);
    }
}

}  // namespace

void CudaOps::attention_forward_cached(Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v) {
    const OpTimer timer(*this, "attention_forward_cached");
    check_attention_forward_cached(out, q, k, v);
    for (const Tensor* t : std::initializer_list<const Tensor*>{&out, &q, &k, &v})
        if (!on_cuda(*t, DType::bf16))
            throw std::invalid_argument("attention_forward_cached: expected bf16 tensors on cuda; got " + describe(*t));
    const CachedDims d{q.dim(0), q.dim(1), k.dim(1), q.dim(2), k.dim(2), q.dim(3)};
    if (d.B == 0 || d.Tq == 0 || d.H == 0) return;
    if (d.Tk > kMaxKeys || d.B * d.H * d.Tq > INT_MAX)
        throw std::invalid_argument("attention_forward_cached: " + std::to_string(d.Tk) + " keys (at most " +
                                    std::to_string(kMaxKeys) + ") or " + std::to_string(d.B * d.H * d.Tq) +
                                    " (batch, head, query) triples is too many");
    const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d.hd)));
    const size_t smem = static_cast<size_t>(d.Tk) * sizeof(float);
    attention_cached_kernel<<<static_cast<unsigned>(d.B * d.H * d.Tq), kThreads, smem, context().stream>>>(
        static_cast<bf16*>(out.data()), static_cast<const bf16*>(q.data()), static_cast<const bf16*>(k.data()),
        static_cast<const bf16*>(v.data()), d, scale);
    CUDA_CHECK_LAUNCH();
}

}  // namespace nb::cuda

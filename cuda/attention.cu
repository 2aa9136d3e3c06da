// CudaOps::attention_forward / attention_backward: causal grouped-query attention. After the checks below, each
// call first offers itself to cuDNN's fused attention (cuda/attention_cudnn.cu; cuda/attention_cudnn.h says
// when cuDNN takes it: NOBUBBLE_CUDA_ATTENTION=auto|cudnn|kernel); otherwise it runs the hand-written
// FlashAttention-2-style kernels of cuda/attention_kernels.cuh (the math and the tiling are described there).
//
// Host side: shape/dtype/device checks (std::invalid_argument naming the op and the shapes), the head dimension
// padded up to 64 or 128 (template instantiations), dynamic shared memory opted in above 48 KiB, every launch
// on the context's stream followed by CUDA_CHECK_LAUNCH.
//
// Backward runs three kernels: D = rowsum(dO * O) (f32 scratch [B,H,T]), kernel A (dK, dV: one block per key
// tile, looping over the group's query heads in order), kernel B (dQ: one block per query tile). No atomics:
// every gradient element has exactly one writing block, so results are bitwise repeatable.
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <initializer_list>
#include <string>
#include <utility>

#include "cuda/attention_cudnn.h"
#include "cuda/attention_kernels.cuh"
#include "cuda/context.h"
#include "cuda/cuda_check.h"
#include "cuda/cuda_ops.h"
#include "cuda/describe.h"
#include "src/core/error.h"
#include "src/ops/layer_checks.h"

namespace nb::cuda {

namespace {

using attn::Dims;

std::string named(const char* name, const Tensor& t) { return std::string(name) + " " + describe(t); }

bool aligned16(const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data()) % 16 == 0; }

// After the CPU reference's shape checks (src/ops/layer_checks.h), checks this backend's dtypes, device and
// kernel limits on q/k/v/out/lse (the forward's tensors, also backward's inputs) and returns the problem size.
Dims check_attention_types(const char* op, const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k,
                           const Tensor& v) {
    const auto fail = [&](const std::string& why) {
        throw std::invalid_argument(std::string(op) + ": " + why +
                                    "; expected q/out [B,T,H,hd] bf16, k/v [B,T,KV,hd] bf16 with H % KV == 0, lse "
                                    "[B,H,T] f32, all on cuda; got " +
                                    named("q", q) + ", " + named("k", k) + ", " + named("v", v) + ", " +
                                    named("out", out) + ", " + named("lse", lse));
    };
    for (const Tensor* t : {&q, &k, &v, &out})
        if (t->dtype() != DType::bf16 || t->device() != Device::cuda) fail("q, k, v, out must be bf16 on cuda");
    if (lse.dtype() != DType::f32 || lse.device() != Device::cuda) fail("lse must be f32 on cuda");

    const int64_t hd = q.dim(3);
    if (hd <= 0 || hd > attn::kMaxHeadDim || hd % 8 != 0)
        fail("head_dim " + std::to_string(hd) + " unsupported (the CUDA kernels take a multiple of 8 up to " +
             std::to_string(attn::kMaxHeadDim) + ")");
    Dims d{};
    d.B = q.dim(0);
    d.T = q.dim(1);
    d.H = q.dim(2);
    d.KV = k.dim(2);
    d.hd = hd;
    d.group = d.H / d.KV;
    d.n_tiles = (d.T + attn::kTile - 1) / attn::kTile;
    d.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));  // as the CPU reference
    if (d.n_tiles * d.B * d.H > INT_MAX) fail("too many tiles for one grid");
    return d;
}

void check_aligned(const char* op, std::initializer_list<std::pair<const char*, const Tensor*>> tensors) {
    for (const auto& [name, t] : tensors)
        if (!aligned16(*t))
            throw std::invalid_argument(std::string(op) + ": " + name + " must start 16-byte aligned (offset " +
                                        std::to_string(reinterpret_cast<uintptr_t>(t->data()) % 16) + " bytes)");
}

// Raises the kernel's dynamic shared-memory limit to `bytes` (needed above 48 KiB), after checking the device
// can give that much to one block.
template <class Kernel>
void set_smem(Kernel kernel, size_t bytes, const CudaContext& ctx, const char* what) {
    int optin = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, ctx.device));
    if (bytes > static_cast<size_t>(optin))
        throw RuntimeError(std::string(what) + ": needs " + std::to_string(bytes) +
                           " bytes of shared memory per block, device " + ctx.device_name + " allows " +
                           std::to_string(optin));
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

template <int HDP>
void launch_forward(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v, const Dims& d,
                    CudaContext& ctx) {
    constexpr size_t smem = attn::FwdSmem<HDP>::bytes;
    auto* kernel = attn::attention_forward_kernel<HDP>;
    set_smem(kernel, smem, ctx, "attention_forward");
    const auto blocks = static_cast<unsigned>(d.n_tiles * d.B * d.H);
    kernel<<<blocks, attn::kThreads, smem, ctx.stream>>>(
        static_cast<bf16*>(out.data()), static_cast<float*>(lse.data()), static_cast<const bf16*>(q.data()),
        static_cast<const bf16*>(k.data()), static_cast<const bf16*>(v.data()), d);
    CUDA_CHECK_LAUNCH();
}

template <int HDP>
void launch_backward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout, const Tensor& q, const Tensor& k,
                     const Tensor& v, const Tensor& lse, const Tensor& D, const Dims& d, CudaContext& ctx) {
    const auto* dop = static_cast<const bf16*>(dout.data());
    const auto* qp = static_cast<const bf16*>(q.data());
    const auto* kp = static_cast<const bf16*>(k.data());
    const auto* vp = static_cast<const bf16*>(v.data());
    const auto* lp = static_cast<const float*>(lse.data());
    const auto* Dp = static_cast<const float*>(D.data());

    // Kernel A: dK, dV. One block per (key tile, b, kv head).
    {
        constexpr size_t smem = attn::DkvSmem<HDP>::bytes;
        auto* kernel = attn::attention_backward_dkdv_kernel<HDP>;
        set_smem(kernel, smem, ctx, "attention_backward (dk, dv)");
        const auto blocks = static_cast<unsigned>(d.n_tiles * d.B * d.KV);
        kernel<<<blocks, attn::kThreads, smem, ctx.stream>>>(static_cast<bf16*>(dk.data()),
                                                            static_cast<bf16*>(dv.data()), dop, qp, kp, vp, lp, Dp, d);
        CUDA_CHECK_LAUNCH();
    }
    // Kernel B: dQ. One block per (query tile, b, head).
    {
        constexpr size_t smem = attn::DqSmem<HDP>::bytes;
        auto* kernel = attn::attention_backward_dq_kernel<HDP>;
        set_smem(kernel, smem, ctx, "attention_backward (dq)");
        const auto blocks = static_cast<unsigned>(d.n_tiles * d.B * d.H);
        kernel<<<blocks, attn::kThreads, smem, ctx.stream>>>(static_cast<bf16*>(dq.data()), dop, qp, kp, vp, lp, Dp,
                                                            d);
        CUDA_CHECK_LAUNCH();
    }
}

}  // namespace

void CudaOps::attention_forward(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v) {
    const OpTimer timer(*this, "attention_forward");
    check_attention_forward(out, lse, q, k, v);
    const Dims d = check_attention_types("attention_forward", out, lse, q, k, v);
    check_aligned("attention_forward", {{"q", &q}, {"k", &k}, {"v", &v}});
    if (d.B == 0 || d.T == 0 || d.H == 0) return;
    if (attention_forward_cudnn(*this, {d.B, d.T, d.H, d.KV, d.hd}, out, lse, q, k, v)) return;
    if (d.hd <= 64)
        launch_forward<64>(out, lse, q, k, v, d, context());
    else
        launch_forward<128>(out, lse, q, k, v, d, context());
}

void CudaOps::attention_backward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout, const Tensor& q,
                                 const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse) {
    const OpTimer timer(*this, "attention_backward");
    check_attention_backward(dq, dk, dv, dout, q, k, v, out, lse);
    const Dims d = check_attention_types("attention_backward", out, lse, q, k, v);
    if (!on_cuda(dout, DType::bf16) || !on_cuda(dq, DType::bf16) || !on_cuda(dk, DType::bf16) ||
        !on_cuda(dv, DType::bf16))
        throw std::invalid_argument("attention_backward: dout and dq must match q " + shape_string(q.shape()) +
                                    ", dk and dv must match k " + shape_string(k.shape()) +
                                    ", all bf16 on cuda; got " + named("dout", dout) + ", " + named("dq", dq) +
                                    ", " + named("dk", dk) + ", " + named("dv", dv));
    check_aligned("attention_backward", {{"q", &q}, {"k", &k}, {"v", &v}, {"dout", &dout}});
    if (d.B == 0 || d.T == 0 || d.H == 0) return;
    if (attention_backward_cudnn(*this, {d.B, d.T, d.H, d.KV, d.hd}, dq, dk, dv, dout, q, k, v, out, lse)) return;

    CudaContext& ctx = context();
    // D[b,h,t] = sum_c dO * O in f32 (a cached allocation; every element is written by the kernel).
    Tensor D = Tensor::zeros({d.B, d.H, d.T}, DType::f32, Device::cuda);
    {
        constexpr int kWarpsPerBlock = attn::kRowThreads / 32;
        const int64_t rows = d.B * d.T * d.H;
        const int64_t blocks = (rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
        if (blocks > INT_MAX)
            throw std::invalid_argument("attention_backward: " + std::to_string(rows) +
                                        " rows are too many for one grid");
        attn::attention_row_dot_kernel<<<static_cast<unsigned>(blocks), attn::kRowThreads, 0, ctx.stream>>>(
            static_cast<float*>(D.data()), static_cast<const bf16*>(dout.data()),
            static_cast<const bf16*>(out.data()), d);
        CUDA_CHECK_LAUNCH();
    }
    if (d.hd <= 64)
        launch_backward<64>(dq, dk, dv, dout, q, k, v, lse, D, d, ctx);
    else
        launch_backward<128>(dq, dk, dv, dout, q, k, v, lse, D, d, ctx);
}

}  // namespace nb::cuda

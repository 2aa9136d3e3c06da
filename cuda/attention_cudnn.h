// Which implementation runs CudaOps::attention_forward / attention_backward: cuDNN's fused scaled-dot-product
// attention (flash attention, cuda/attention_cudnn.cu) or the hand-written fallback kernels
// (cuda/attention_kernels.cuh), and the hooks attention.cu calls to try cuDNN first.
//
// The choice: the environment variable NOBUBBLE_CUDA_ATTENTION=auto|cudnn|kernel, read when the backend first
// needs it (default auto), or set_attention_impl() (tests). auto: cuDNN where it takes the problem, else the
// kernels; cudnn: cuDNN or a RuntimeError naming the cuDNN status and the shape; kernel: the kernels only.
// cuDNN takes a problem when cudnnGetVersion() >= 9.0, the GPU's compute capability >= 8.0, head_dim % 8 == 0
// and <= 128, and both the forward and the backward graph of that shape build an execution plan. The decision
// is made once per shape (B, T, H, KV, head_dim) for both directions together and cached, so the forward and
// the backward of a microbatch use the same implementation.
// Both implementations give the same bits for the same inputs: cuDNN's backward graph is the deterministic
// variant (no f32 dQ accumulator; cuda/attention_cudnn.cu says what it costs).
//
// No cuDNN header here: cuDNN types stay inside cuda/attention_cudnn.cu.
#pragma once

#include <cstdint>
#include <string>

#include "src/core/name_table.h"
#include "src/core/tensor.h"

namespace nb::cuda {

class CudaOps;

enum class AttentionImpl { automatic, cudnn, kernel };
// The values of the environment variable NOBUBBLE_CUDA_ATTENTION (not a flag: a RuntimeError names a bad one).
inline constexpr auto kAttentionImpls = name_table<AttentionImpl>("NOBUBBLE_CUDA_ATTENTION", {
    {"auto", AttentionImpl::automatic},
    {"cudnn", AttentionImpl::cudnn},
    {"kernel", AttentionImpl::kernel},
});

// "auto", "cudnn" or "kernel".
const char* attention_impl_name(AttentionImpl impl);
// Parses a NOBUBBLE_CUDA_ATTENTION value; nullptr or "" is auto. RuntimeError for a name not in kAttentionImpls.
AttentionImpl parse_attention_impl(const char* value);

// The backend's current choice (first call: from the environment), and an override for this backend.
AttentionImpl attention_impl(CudaOps& ops);
void set_attention_impl(CudaOps& ops, AttentionImpl impl);

// Calls that ran on each implementation since the backend started (or since reset_attention_counts).
struct AttentionCounts {
    int64_t cudnn_forward = 0, cudnn_backward = 0;
    int64_t kernel_forward = 0, kernel_backward = 0;
};
AttentionCounts attention_counts(CudaOps& ops);
void reset_attention_counts(CudaOps& ops);
// "cudnn" or "kernel": what the latest attention call ran; "none" before the first.
const char* last_attention_impl(CudaOps& ops);
// One line for reports, e.g. "cuDNN 9.19.0 fused flash attention (NOBUBBLE_CUDA_ATTENTION=auto): forward 64
// calls, backward 64 calls; hand-written kernels: 0 calls", with why cuDNN was not used where it was not.
std::string attention_report(CudaOps& ops);

// ---- called by cuda/attention.cu after its shape checks ----
struct AttentionShape {
    int64_t B, T, H, KV, hd;
};
// Run the call through cuDNN when the choice and the problem allow it: true when cuDNN ran (outputs written),
// false when the caller must run the hand-written kernels (counted as a kernel call). With the choice `cudnn`
// and a problem cuDNN does not take: RuntimeError. Backward ACCUMULATES into dq, dk, dv like the kernels.
bool attention_forward_cudnn(CudaOps& ops, const AttentionShape& s, Tensor& out, Tensor& lse, const Tensor& q,
                             const Tensor& k, const Tensor& v);
bool attention_backward_cudnn(CudaOps& ops, const AttentionShape& s, Tensor& dq, Tensor& dk, Tensor& dv,
                              const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& out, const Tensor& lse);

}  // namespace nb::cuda

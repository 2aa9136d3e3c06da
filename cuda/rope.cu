// Rotary position embedding on the CUDA backend (the f32 reference is src/cpu/rope.cpp; same math).
//
// x, out, dout, din: bf16 [N, heads, head_dim], row n at position pos = n % seq_len (rope_forward_at, decoding
// with a KV cache: pos = first_position + n). Rotate-half convention
// (HF LLaMA): for i < half = head_dim / 2 and angle = pos * inv_freq[i], inv_freq[i] = theta^(-2i / head_dim):
//   out[i]      = x[i] cos - x[i+half] sin
//   out[i+half] = x[i+half] cos + x[i] sin
//
// Precision choice: inv_freq is computed on the host in double and rounded once to float (the CPU reference's
// inv_freq, to within that rounding); the angle pos * inv_freq and its sin/cos are computed in f32 in the kernel
// (sincosf, full precision: the build does not use fast math). This is exactly what HF/torch computes. The CPU
// reference instead rounds a double cos/sin table; the f32 angle differs from it by at most ~pos * 2^-23 rad
// (2.4e-4 at pos 2047), so outputs differ by at most ~2.4e-4 * |x|, well below one bf16 rounding (2^-9 relative).
// Computing cos/sin in the kernel avoids building and uploading a [seq_len, half] table on every call.
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
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

// The inverse frequencies travel by value as a kernel parameter (1 KiB; well under the 4 KiB parameter limit),
// so no device buffer or upload is needed. head_dim up to 512 covers every LLaMA-style model.
constexpr int kMaxHalf = 256;
struct InvFreq {
    float v[kMaxHalf];
};

constexpr int kThreads = 256;

// One thread per (row n, frequency i): it computes sin/cos once and rotates the pair (i, i+half) of every head
// of that row (the angle does not depend on the head). Adjacent threads take adjacent i, so loads and stores of
// one head are coalesced. With sign = +1 this is the forward rotation; with sign = -1 it is the transpose
// (rotation by -angle), which is the gradient since the rotation is orthogonal:
//   din[i]      += dout[i] cos + dout[i+half] sin
//   din[i+half] += dout[i+half] cos - dout[i] sin
// accumulate = false writes out, accumulate = true adds to it (in f32, rounded once to bf16). Each thread reads
// both elements of a pair before writing them and no other thread touches that pair, so out may alias x.
__global__ void rope_kernel(bf16* out, const bf16* x, int64_t n_rows, int heads, int half, int64_t seq_len,
                            int64_t first_position, InvFreq inv_freq, float sign, bool accumulate) {
    const int64_t idx = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
    if (idx >= n_rows * half) return;
    const int i = static_cast<int>(idx % half);
    const int64_t n = idx / half;
    const int64_t pos = first_position + n % seq_len;
    const float angle = static_cast<float>(pos) * inv_freq.v[i];  // f32, as torch; pos < 2^24 is exact in float
    float s, c;
    sincosf(angle, &s, &c);
    s *= sign;
    const int head_dim = 2 * half;
    for (int h = 0; h < heads; ++h) {
        const int64_t base = (n * heads + h) * head_dim;
        const float a = to_f32(x[base + i]), b = to_f32(x[base + i + half]);
        const float lo = a * c - b * s;
        const float hi = b * c + a * s;
        if (accumulate) {
            out[base + i] = to_bf16(to_f32(out[base + i]) + lo);
            out[base + i + half] = to_bf16(to_f32(out[base + i + half]) + hi);
        } else {
            out[base + i] = to_bf16(lo);
            out[base + i + half] = to_bf16(hi);
        }
    }
}

// After the CPU reference's shape checks (src/ops/layer_checks.h): this backend's dtype/device and the kernel's
// limits.
void check_rope_types(const char* op, const Tensor& out, const Tensor& x, int64_t seq_len) {
    if (!on_cuda(out, DType::bf16) || !on_cuda(x, DType::bf16))
        throw std::invalid_argument(std::string(op) +
                                    ": expected x and out [N, heads, head_dim] bf16 on cuda with even head_dim and "
                                    "N a multiple of seq_len " +
                                    std::to_string(seq_len) + "; got x " + describe(x) + ", out " + describe(out));
    if (x.dim(2) / 2 > kMaxHalf || x.dim(1) > INT_MAX || seq_len > (int64_t{1} << 24))
        throw std::invalid_argument(std::string(op) + ": head_dim " + std::to_string(x.dim(2)) + " (at most " +
                                    std::to_string(2 * kMaxHalf) + "), heads " + std::to_string(x.dim(1)) +
                                    " or seq_len " + std::to_string(seq_len) + " (at most 2^24) is too large");
}

// inv_freq[i] = theta^(-2i / head_dim), in double as the CPU reference, rounded once to float.
InvFreq make_inv_freq(int64_t head_dim, float theta) {
    InvFreq f{};
    for (int64_t i = 0; i < head_dim / 2; ++i)
        f.v[i] = static_cast<float>(std::pow(static_cast<double>(theta), -2.0 * static_cast<double>(i) / head_dim));
    return f;
}

void launch_rope(cudaStream_t stream, Tensor& out, const Tensor& x, int64_t seq_len, int64_t first_position,
                 float theta, float sign, bool accumulate) {
    const int64_t n_rows = x.dim(0), heads = x.dim(1), half = x.dim(2) / 2;
    const int64_t work = n_rows * half;
    if (work == 0 || heads == 0) return;  // empty: nothing to write (and a zero-sized grid is a launch error)
    if (work / kThreads >= INT_MAX)
        throw std::invalid_argument("rope: " + std::to_string(work) + " (row, frequency) pairs exceed the grid limit");
    const unsigned blocks = blocks_for(work, kThreads);
    rope_kernel<<<blocks, kThreads, 0, stream>>>(static_cast<bf16*>(out.data()), static_cast<const bf16*>(x.data()),
                                                 n_rows, static_cast<int>(heads), static_cast<int>(half), seq_len,
                                                 first_position, make_inv_freq(x.dim(2), theta), sign, accumulate);
    CUDA_CHECK_LAUNCH();
}

}  // namespace

void CudaOps::rope_forward(Tensor& out, const Tensor& x, int64_t seq_len, float theta) {
    const OpTimer timer(*this, "rope_forward");
    check_rope_forward(out, x, seq_len);
    check_rope_types("rope_forward", out, x, seq_len);
    launch_rope(context().stream, out, x, seq_len, 0, theta, 1.0f, false);
}

void CudaOps::rope_forward_at(Tensor& out, const Tensor& x, int64_t first_position, float theta) {
    const OpTimer timer(*this, "rope_forward_at");
    check_rope_forward_at(out, x, first_position);
    if (x.dim(0) == 0) return;
    check_rope_types("rope_forward_at", out, x, first_position + x.dim(0));
    launch_rope(context().stream, out, x, x.dim(0), first_position, theta, 1.0f, false);
}

void CudaOps::rope_backward(Tensor& din, const Tensor& dout, int64_t seq_len, float theta) {
    const OpTimer timer(*this, "rope_backward");
    check_rope_backward(din, dout, seq_len);
    check_rope_types("rope_backward", din, dout, seq_len);
    launch_rope(context().stream, din, dout, seq_len, 0, theta, -1.0f, true);
}

}  // namespace nb::cuda

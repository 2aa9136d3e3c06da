// SwiGLU on the CUDA backend (the f32 reference is src/cpu/swiglu.cpp; same math).
//
// gate, up, out, dout, dgate, dup: bf16, all of one shape (any). Element-wise; every value is widened to f32,
// computed in f32 and rounded once to bf16 on store. expf is the full-precision one (no fast math in the build),
// so the sigmoid is the CPU's to within a few f32 ulps.
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

constexpr int kThreads = 256;

// sigmoid(z) = 1 / (1 + exp(-z)); for z < -88 exp(-z) is inf and this is 0, the right limit (as the CPU).
__device__ __forceinline__ float sigmoid(float z) { return 1.0f / (1.0f + expf(-z)); }

// out[i] = silu(gate[i]) * up[i] = (gate[i] * sigmoid(gate[i])) * up[i]
// One thread per element (the simplest correct mapping; the op is memory-bound either way).
__global__ void swiglu_forward_kernel(bf16* out, const bf16* gate, const bf16* up, int64_t n) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
    if (i >= n) return;
    const float z = to_f32(gate[i]);
    out[i] = to_bf16(z * sigmoid(z) * to_f32(up[i]));
}

// With z = gate[i], s = sigmoid(z): d silu / dz = s + z s (1 - s) = s (1 + z (1 - s)), so
//   dgate[i] += dout[i] * up[i] * s * (1 + z (1 - s))
//   dup[i]   += dout[i] * silu(z)
// Each output is read, added to in f32 and rounded once to bf16.
__global__ void swiglu_backward_kernel(bf16* dgate, bf16* dup, const bf16* dout, const bf16* gate, const bf16* up,
                                       int64_t n) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
    if (i >= n) return;
    const float z = to_f32(gate[i]), s = sigmoid(z), g = to_f32(dout[i]), u = to_f32(up[i]);
    dgate[i] = to_bf16(to_f32(dgate[i]) + g * u * (s * (1.0f + z * (1.0f - s))));
    dup[i] = to_bf16(to_f32(dup[i]) + g * (z * s));
}

// After the CPU reference's shape checks (src/ops/layer_checks.h): this backend's dtype and device.
void check_bf16(const char* op, const Tensor& a, const Tensor& b, const Tensor& c) {
    if (!on_cuda(a, DType::bf16) || !on_cuda(b, DType::bf16) || !on_cuda(c, DType::bf16))
        throw std::invalid_argument(std::string(op) + ": all tensors must be bf16 on cuda with one shape; got " +
                                    describe(a) + ", " + describe(b) + ", " + describe(c));
}

unsigned grid_for(const char* op, int64_t n) {
    if (n / kThreads >= INT_MAX)
        throw std::invalid_argument(std::string(op) + ": " + std::to_string(n) + " elements exceed the grid limit");
    return blocks_for(n, kThreads);
}

}  // namespace

void CudaOps::swiglu_forward(Tensor& out, const Tensor& gate, const Tensor& up) {
    const OpTimer timer(*this, "swiglu_forward");
    check_swiglu_forward(out, gate, up);
    check_bf16("swiglu_forward", out, gate, up);
    const int64_t n = out.numel();
    if (n == 0) return;
    swiglu_forward_kernel<<<grid_for("swiglu_forward", n), kThreads, 0, context().stream>>>(
        static_cast<bf16*>(out.data()), static_cast<const bf16*>(gate.data()), static_cast<const bf16*>(up.data()),
        n);
    CUDA_CHECK_LAUNCH();
}

void CudaOps::swiglu_backward(Tensor& dgate, Tensor& dup, const Tensor& dout, const Tensor& gate, const Tensor& up) {
    const OpTimer timer(*this, "swiglu_backward");
    check_swiglu_backward(dgate, dup, dout, gate, up);
    check_bf16("swiglu_backward", dout, gate, up);
    check_bf16("swiglu_backward", dgate, dup, gate);
    const int64_t n = gate.numel();
    if (n == 0) return;
    swiglu_backward_kernel<<<grid_for("swiglu_backward", n), kThreads, 0, context().stream>>>(
        static_cast<bf16*>(dgate.data()), static_cast<bf16*>(dup.data()), static_cast<const bf16*>(dout.data()),
        static_cast<const bf16*>(gate.data()), static_cast<const bf16*>(up.data()), n);
    CUDA_CHECK_LAUNCH();
}

}  // namespace nb::cuda

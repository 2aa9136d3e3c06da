// SwiGLU activation: out = silu(gate) * up, silu(z) = z * sigmoid(z) = z / (1 + exp(-z)).
//
// gate, up and out have the same shape (any), element-wise in float.
#include <cmath>

#include "src/cpu/cpu_ops.h"
#include "src/ops/layer_checks.h"

namespace nb {

namespace {

// 1 / (1 + exp(-z)): for z < -88 exp(-z) is inf and this is 0, the right limit.
float sigmoid(float z) { return 1.0f / (1.0f + std::exp(-z)); }

}  // namespace

void CpuOps::swiglu_forward(Tensor& out, const Tensor& gate, const Tensor& up) {
    const OpTimer timer(*this, "swiglu_forward");
    check_swiglu_forward(out, gate, up);
    const float *g = gate.f32(), *u = up.f32();
    float* o = out.f32();
    for (int64_t i = 0, n = out.numel(); i < n; ++i) o[i] = g[i] * sigmoid(g[i]) * u[i];
}

// With s = sigmoid(z): d silu / dz = s + z s (1 - s) = s (1 + z (1 - s)), so
//   dgate += dout * up * s * (1 + z (1 - s))
//   dup   += dout * silu(z)
void CpuOps::swiglu_backward(Tensor& dgate, Tensor& dup, const Tensor& dout, const Tensor& gate, const Tensor& up) {
    const OpTimer timer(*this, "swiglu_backward");
    check_swiglu_backward(dgate, dup, dout, gate, up);
    const float *g = gate.f32(), *u = up.f32(), *go = dout.f32();
    float *dg = dgate.f32(), *du = dup.f32();
    for (int64_t i = 0, n = gate.numel(); i < n; ++i) {
        const float z = g[i], s = sigmoid(z);
        dg[i] += go[i] * u[i] * (s * (1.0f + z * (1.0f - s)));
        du[i] += go[i] * (z * s);
    }
}

}  // namespace nb

// Lion's update on the device, the CPU's arithmetic (src/cpu/lion.cpp) with explicitly rounded intrinsics so that
// nothing is contracted; the two FMAs are the CPU's std::fma:
//   p = p * decay ;  p = p - lr * sign(fma(g, 1-b1, m*b1)) ;  m = fma(g, 1-b2, m*b2)
// decay = 1 - lr*wd and 1 - b are computed on the host in float by the CPU's code (src/ops/optimizer_scalars.h).
// lr * sign is exact (sign is -1, 0 or 1), so p - lr*sign is one rounding on both sides.
#include <cuda_runtime.h>

#include "cuda/context.h"
#include "cuda/cuda_check.h"
#include "cuda/cuda_ops.h"
#include "cuda/grid_stride.cuh"
#include "src/ops/optimizer_checks.h"
#include "src/ops/optimizer_scalars.h"

namespace nb::cuda {

namespace {

struct LionScalars {
    float lr, decay, beta1, one_minus_beta1, beta2, one_minus_beta2;
};

// sign(0) = sign(NaN) = 0, as the CPU's comparisons give.
__device__ __forceinline__ float sign_of(float x) { return x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : 0.0f); }

__global__ void lion_kernel(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ m, int64_t n,
                            LionScalars s) {
    for (int64_t i = first_element(); i < n; i += element_stride()) {
        const float gi = g[i], mi = m[i];
        const float direction = __fmaf_rn(gi, s.one_minus_beta1, __fmul_rn(mi, s.beta1));
        const float pi = __fmul_rn(p[i], s.decay);
        p[i] = __fsub_rn(pi, __fmul_rn(s.lr, sign_of(direction)));
        m[i] = __fmaf_rn(gi, s.one_minus_beta2, __fmul_rn(mi, s.beta2));
    }
}

}  // namespace

void CudaOps::lion_update(Tensor& param, const Tensor& grad, Tensor& m, float lr, float beta1, float beta2,
                          float weight_decay) {
    const OpTimer timer(*this, "lion_update");
    check_optimizer_tensors("lion_update", Device::cuda, {{"param", &param}, {"grad", &grad}, {"m", &m}});
    const int64_t n = param.numel();
    if (n == 0) return;
    const LionScalars s{lr, decoupled_decay(lr, weight_decay), beta1, 1.0f - beta1, beta2, 1.0f - beta2};
    lion_kernel<<<elementwise_blocks(n), kElementwiseThreads, 0, context().stream>>>(
        static_cast<float*>(param.data()), static_cast<const float*>(grad.data()), static_cast<float*>(m.data()), n,
        s);
    CUDA_CHECK_LAUNCH();
}

}  // namespace nb::cuda

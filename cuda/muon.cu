// Muon's element-wise kernels on the device, the CPU's arithmetic (src/cpu/muon.cpp) with explicitly rounded
// intrinsics so that nothing is contracted (its Newton-Schulz iteration is cuda/newton_schulz.cu):
//   muon_momentum:  buf = buf + (1-mu)*(g - buf) ;  update = nesterov ? g + mu*(buf - g) : buf
//   muon_apply:     p = p * decay ;  p = p - lr*(ortho*scale)          decay = 1 - lr*wd (host, float)
#include <cuda_runtime.h>

#include "cuda/context.h"
#include "cuda/cuda_check.h"
#include "cuda/cuda_ops.h"
#include "cuda/grid_stride.cuh"
#include "src/ops/optimizer_checks.h"
#include "src/ops/optimizer_scalars.h"

namespace nb::cuda {

namespace {

__global__ void muon_momentum_kernel(float* __restrict__ update, const float* __restrict__ g, float* __restrict__ buf,
                                     float mu, float one_minus_mu, bool nesterov, int64_t n) {
    for (int64_t i = first_element(); i < n; i += element_stride()) {
        const float gi = g[i];
        const float bi = __fadd_rn(buf[i], __fmul_rn(one_minus_mu, __fsub_rn(gi, buf[i])));
        buf[i] = bi;
        update[i] = nesterov ? __fadd_rn(gi, __fmul_rn(mu, __fsub_rn(bi, gi))) : bi;
    }
}

__global__ void muon_apply_kernel(float* __restrict__ p, const float* __restrict__ o, float lr, float scale,
                                  float decay, int64_t n) {
    for (int64_t i = first_element(); i < n; i += element_stride())
        p[i] = __fsub_rn(__fmul_rn(p[i], decay), __fmul_rn(lr, __fmul_rn(o[i], scale)));
}

}  // namespace

void CudaOps::muon_momentum(Tensor& update, const Tensor& grad, Tensor& momentum, float mu, bool nesterov) {
    const OpTimer timer(*this, "muon_momentum");
    check_optimizer_tensors("muon_momentum", Device::cuda,
                            {{"update", &update}, {"grad", &grad}, {"momentum", &momentum}});
    const int64_t n = update.numel();
    if (n == 0) return;
    muon_momentum_kernel<<<elementwise_blocks(n), kElementwiseThreads, 0, context().stream>>>(
        static_cast<float*>(update.data()), static_cast<const float*>(grad.data()),
        static_cast<float*>(momentum.data()), mu, 1.0f - mu, nesterov, n);
    CUDA_CHECK_LAUNCH();
}

void CudaOps::muon_apply(Tensor& param, const Tensor& ortho, float lr, float scale, float weight_decay) {
    const OpTimer timer(*this, "muon_apply");
    check_optimizer_tensors("muon_apply", Device::cuda, {{"param", &param}, {"ortho", &ortho}});
    const int64_t n = param.numel();
    if (n == 0) return;
    muon_apply_kernel<<<elementwise_blocks(n), kElementwiseThreads, 0, context().stream>>>(
        static_cast<float*>(param.data()), static_cast<const float*>(ortho.data()), lr, scale,
        decoupled_decay(lr, weight_decay), n);
    CUDA_CHECK_LAUNCH();
}

}  // namespace nb::cuda

// One element of one AdamW step, for the fused multi-tensor kernel (cuda/adamw_multi.cu). The CPU's arithmetic
// (src/cpu/adamw.cpp, torch.optim.AdamW's single-tensor path), each operation an explicitly rounded intrinsic so
// that nvcc can neither contract nor approximate anything:
//   p = p * decay ;  m = fma(1-b1, g, m*b1) ;  v = fma((1-b2)*g, g, v*b2)
//   denom = sqrt(v) / bc2_sqrt + eps ;  p = p + (neg_step_size * m) / denom
#pragma once

#include <cstdint>

#include "src/ops/adamw_scalars.h"

namespace nb::cuda {

__device__ __forceinline__ void adamw_step(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ m,
                                           float* __restrict__ v, int64_t i, const AdamWScalars& s) {
    const float gi = g[i];
    float pi = __fmul_rn(p[i], s.decay);
    const float mi = __fmaf_rn(s.one_minus_beta1, gi, __fmul_rn(m[i], s.beta1));
    const float vi = __fmaf_rn(__fmul_rn(s.one_minus_beta2, gi), gi, __fmul_rn(v[i], s.beta2));
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), s.bc2_sqrt), s.eps);
    pi = __fadd_rn(pi, __fdiv_rn(__fmul_rn(s.neg_step_size, mi), denom));
    m[i] = mi;
    v[i] = vi;
    p[i] = pi;
}

}  // namespace nb::cuda

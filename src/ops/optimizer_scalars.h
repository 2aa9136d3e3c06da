// The float32 scalars of the Lion, Adan, MARS and Muon kernels (src/ops/ops.h), computed on the host once per step
// (and parameter) by this one piece of code for both backends (src/cpu/*.cpp, cuda/*.cu), so that their
// results can agree bit for bit. As with AdamW (src/ops/adamw_scalars.h): what the reference implementations compute
// as Python floats (bias corrections, step sizes) is computed in double and rounded to float once; what they
// compute from float hyperparameters in float (1 - beta, 1 - lr*wd) is computed in float here too.
//
// The expressions are written exactly as the CPU optimizers always computed them (the oracle tests pin those
// bits), including where a float is promoted to double.
#pragma once

#include <cmath>
#include <cstdint>

#include "src/ops/ops.h"

namespace nb {

// 1 - lr*wd, in float: the factor of decoupled weight decay (Lion, Muon).
inline float decoupled_decay(float lr, float weight_decay) { return 1.0f - lr * weight_decay; }

// 1 - b^t, in double (t counts from 1).
inline double bias_correction(double beta, int64_t step) { return 1.0 - std::pow(beta, static_cast<double>(step)); }

inline Ops::AdanScalars adan_scalars(float lr, float beta1, float beta2, float beta3, float eps, float weight_decay,
                                     int64_t step) {
    const double b2 = beta2;
    Ops::AdanScalars s{};
    s.beta1 = beta1;
    s.one_minus_beta1 = 1.0f - beta1;
    s.beta2 = beta2;
    s.one_minus_beta2 = 1.0f - beta2;
    s.beta3 = beta3;
    s.one_minus_beta3 = 1.0f - beta3;
    s.bc3_sqrt = static_cast<float>(std::sqrt(bias_correction(beta3, step)));
    s.step_size = static_cast<float>(lr / bias_correction(beta1, step));
    s.step_size_diff = static_cast<float>(lr * b2 / bias_correction(beta2, step));
    s.eps = eps;
    s.shrink = 1.0f + lr * weight_decay;
    s.first_step = step == 1;
    return s;
}

// MARS's correction scale gamma * b1 / (1 - b1): b1 / (1 - b1) in double (the float b1 promoted), times gamma.
inline float mars_correction_scale(float gamma, float beta1) {
    return static_cast<float>(static_cast<double>(gamma) * (beta1 / (1.0 - beta1)));
}

inline Ops::MarsScalars mars_scalars(float lr, float beta1, float beta2, float eps, float weight_decay,
                                     int64_t step) {
    Ops::MarsScalars s{};
    s.beta1 = beta1;
    s.one_minus_beta1 = 1.0f - beta1;
    s.beta2 = beta2;
    s.one_minus_beta2 = 1.0f - beta2;
    s.bc1 = static_cast<float>(bias_correction(beta1, step));
    s.inv_bc2_sqrt = static_cast<float>(1.0 / std::sqrt(bias_correction(beta2, step)));
    s.eps = eps;
    s.neg_lr = -lr;
    s.weight_decay = weight_decay;
    return s;
}

}  // namespace nb

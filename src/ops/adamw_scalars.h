// The float32 scalars of one AdamW step, as torch's kernels see them (torch.optim.AdamW, single-tensor path):
// the Python-level scalars are computed in double and each rounded to float once. Both backends' AdamW kernels
// (src/cpu/adamw.cpp, cuda/adamw_multi.cu) take them from here, so their results can agree bit for bit.
#pragma once

#include <cmath>
#include <cstdint>

namespace nb {

struct AdamWScalars {
    float decay;  // 1 - lr*wd
    float beta1, one_minus_beta1;
    float beta2, one_minus_beta2;
    float bc2_sqrt;       // sqrt(1 - beta2^step)
    float neg_step_size;  // -lr / (1 - beta1^step)
    float eps;
};

inline AdamWScalars adamw_scalars(float lr, float beta1, float beta2, float eps, float weight_decay, int64_t step) {
    const double lr_d = lr, b1 = beta1, b2 = beta2, t = static_cast<double>(step);
    const double bias_correction1 = 1.0 - std::pow(b1, t);
    const double bias_correction2 = 1.0 - std::pow(b2, t);
    AdamWScalars s{};
    s.decay = static_cast<float>(1.0 - lr_d * static_cast<double>(weight_decay));
    s.beta1 = beta1;
    s.one_minus_beta1 = static_cast<float>(1.0 - b1);
    s.beta2 = beta2;
    s.one_minus_beta2 = static_cast<float>(1.0 - b2);
    s.bc2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
    s.neg_step_size = static_cast<float>(-(lr_d / bias_correction1));
    s.eps = eps;
    return s;
}

}  // namespace nb

// One AdamW step, bit-for-bit as torch.optim.AdamW (torch 1.13, the single-tensor path, foreach=False, float32):
//
//   param.mul_(1 - lr*wd)
//   exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
//   exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
//   bias_correction1 = 1 - beta1**step ; bias_correction2 = 1 - beta2**step
//   step_size = lr / bias_correction1
//   denom = (exp_avg_sq.sqrt() / sqrt(bias_correction2)).add_(eps)
//   param.addcdiv_(exp_avg, denom, value=-step_size)
//
// How torch evaluates that, and so how we do:
// - The Python scalars (1 - lr*wd, 1 - beta, the bias corrections, step_size) are doubles; a tensor op rounds
//   its scalar argument to float once, then computes in float.
// - add_ with alpha and addcmul_ are fused multiply-adds in torch's CPU kernels (AVX2 fmadd, and the scalar tail
//   loop contracted by the compiler): m + a*g and v + (c*g)*g round once at the end. We build with
//   -ffp-contract=off, so std::fma spells it out. (Checked bitwise against Debian's torch 1.13.)
// - addcdiv_ is p + (s*m)/denom, each operation rounded; the division by sqrt(bias_correction2) is a true
//   division, not a reciprocal multiply.
// The hyperparameters arrive as float: torch agrees bit-for-bit when its Python floats are those same floats
// (for example lr=float(np.float32(lr))).
#include <cmath>
#include <stdexcept>

#include "src/ops/adamw_scalars.h"
#include "src/cpu/cpu_ops.h"
#include "src/ops/optimizer_checks.h"

namespace nb {

namespace {

// One tensor of the step.
void adamw_update(const Ops::AdamWParamRef& ref, const AdamWScalars& s) {
    float *p = ref.param->f32(), *mp = ref.m->f32(), *vp = ref.v->f32();
    const float* g = ref.grad->f32();
    for (int64_t i = 0, n = ref.param->numel(); i < n; ++i) {
        const float gi = g[i];
        p[i] = p[i] * s.decay;
        mp[i] = std::fma(s.one_minus_beta1, gi, mp[i] * s.beta1);
        vp[i] = std::fma(s.one_minus_beta2 * gi, gi, vp[i] * s.beta2);
        const float denom = std::sqrt(vp[i]) / s.bc2_sqrt + s.eps;
        p[i] = p[i] + (s.neg_step_size * mp[i]) / denom;
    }
}

}  // namespace

// The fused form is a loop here: on one thread there is nothing to fuse, and each tensor's bits are its own.
void CpuOps::adamw_update_multi(const std::vector<AdamWParamRef>& params, float lr, float beta1, float beta2, float eps,
                                int64_t step) {
    const OpTimer timer(*this, "adamw_update_multi");
    check_adamw_step("adamw_update_multi", step);
    for (const AdamWParamRef& p : params) {
        check_optimizer_tensors("adamw_update_multi", Device::cpu,
                                {{"param", p.param}, {"grad", p.grad}, {"m", p.m}, {"v", p.v}});
        adamw_update(p, adamw_scalars(lr, beta1, beta2, eps, p.weight_decay, step));
    }
}

}  // namespace nb

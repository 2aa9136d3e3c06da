// DC-ASGD's delay compensation of a stale gradient (Zheng et al. 2017), the kernel of --delay-fix taylor:
//   grad[i] += ((lambda * grad[i]) * grad[i]) * (w[i] - stale[i])
// The diagonal g (.) g stands in for the Hessian, so this is the first-order Taylor correction of a gradient
// computed at W_stale towards the one at W_t. On the CPU the stale weights are f32 like everything else.
#include <stdexcept>

#include <fmt/format.h>

#include "src/cpu/cpu_ops.h"

namespace nb {

void CpuOps::delay_compensate(Tensor& grad, const Tensor& w, const Tensor& stale, float lambda) {
    const OpTimer timer(*this, "delay_compensate");
    if (w.numel() != grad.numel() || stale.numel() != grad.numel())
        throw std::invalid_argument(fmt::format("delay_compensate: grad {}, w {}, stale {} must have one element count",
                                                shape_string(grad.shape()), shape_string(w.shape()),
                                                shape_string(stale.shape())));
    float* g = grad.f32();
    const float* wp = w.f32();
    const float* sp = stale.f32();
    for (int64_t i = 0, n = grad.numel(); i < n; ++i) g[i] += ((lambda * g[i]) * g[i]) * (wp[i] - sp[i]);
}

}  // namespace nb

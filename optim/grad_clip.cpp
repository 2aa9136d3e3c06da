#include "optim/grad_clip.h"

#include <cmath>

namespace nb {

std::vector<double> param_sum_squares(Ops& ops, const TensorSet& grads) {
    std::vector<double> sums;
    sums.reserve(grads.tensors.size());
    for (const Tensor& g : grads.tensors) sums.push_back(ops.sum_squares(g));
    return sums;
}

double total_sum_squares(const std::vector<std::vector<double>>& per_stage) {
    double sum = 0.0;
    for (const auto& stage : per_stage)
        for (double x : stage) sum += x;
    return sum;
}

double grad_sum_squares(Ops& ops, const TensorSet& grads) { return total_sum_squares({param_sum_squares(ops, grads)}); }

double global_grad_norm(Ops& ops, const TensorSet& grads) { return std::sqrt(grad_sum_squares(ops, grads)); }

double clip_coefficient(double norm, double max_norm) {
    if (!(max_norm > 0.0) || !std::isfinite(norm)) return 1.0;
    const double clip_coef = max_norm / (norm + 1e-6);  // torch's 1e-6 keeps a zero norm finite
    return clip_coef < 1.0 ? clip_coef : 1.0;
}

void clip_grads_to_norm(Ops& ops, TensorSet& grads, double norm, double max_norm) {
    const double coef = clip_coefficient(norm, max_norm);
    if (coef >= 1.0) return;  // torch multiplies by 1.0 here, which changes nothing
    for (Tensor& g : grads.tensors) ops.scale_inplace(g, static_cast<float>(coef));
}

double clip_grad_norm(Ops& ops, TensorSet& grads, double max_norm) {
    const double norm = global_grad_norm(ops, grads);
    clip_grads_to_norm(ops, grads, norm, max_norm);
    return norm;
}

}  // namespace nb

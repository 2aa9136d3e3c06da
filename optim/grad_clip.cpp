#include "optim/grad_clip.h"

#include <cmath>

namespace nb {

namespace {

// g <- g * factor for every gradient, buffers left as they are.
void scale_grads(Ops& ops, const ParamLayout& layout, TensorSet& grads, float factor) {
    for (int i = 0; i < layout.size(); ++i)  // not grads.size(): a tied head's own slot comes after the layout
        if (layout[i].trainable()) ops.scale_inplace(grads[i], factor);
}

}  // namespace

std::vector<double> param_sum_squares(Ops& ops, const ParamLayout& layout, const TensorSet& grads) {
    std::vector<double> sums;
    sums.reserve(static_cast<size_t>(layout.size()));
    for (int i = 0; i < layout.size(); ++i) sums.push_back(layout[i].trainable() ? ops.sum_squares(grads[i]) : 0.0);
    return sums;
}

double total_sum_squares(const std::vector<std::vector<double>>& per_stage) {
    double sum = 0.0;
    for (const auto& stage : per_stage)
        for (double x : stage) sum += x;
    return sum;
}

double grad_sum_squares(Ops& ops, const ParamLayout& layout, const TensorSet& grads) {
    return total_sum_squares({param_sum_squares(ops, layout, grads)});
}

double global_grad_norm(Ops& ops, const ParamLayout& layout, const TensorSet& grads) {
    return std::sqrt(grad_sum_squares(ops, layout, grads));
}

double clip_coefficient(double norm, double max_norm) {
    if (!(max_norm > 0.0) || !std::isfinite(norm)) return 1.0;
    const double clip_coef = max_norm / (norm + 1e-6);  // torch's 1e-6 keeps a zero norm finite
    return clip_coef < 1.0 ? clip_coef : 1.0;
}

void clip_grads_to_norm(Ops& ops, const ParamLayout& layout, TensorSet& grads, double norm, double max_norm) {
    const double coef = clip_coefficient(norm, max_norm);
    if (coef >= 1.0) return;  // torch multiplies by 1.0 here, which changes nothing
    scale_grads(ops, layout, grads, static_cast<float>(coef));
}

void clip_grads_to_norms(Ops& ops, const ParamLayout& layout, TensorSet& grads, double norm, double first_norm,
                         double max_norm) {
    ParamLayout first, rest;
    TensorSet first_grads, rest_grads;
    for (int i = 0; i < layout.size(); ++i) {
        (i == 0 ? first : rest).add(layout[i]);
        (i == 0 ? first_grads : rest_grads).tensors.push_back(grads[i]);
    }
    clip_grads_to_norm(ops, first, first_grads, first_norm, max_norm);
    clip_grads_to_norm(ops, rest, rest_grads, norm, max_norm);
}

double clip_grad_norm(Ops& ops, const ParamLayout& layout, TensorSet& grads, double max_norm) {
    const double norm = global_grad_norm(ops, layout, grads);
    clip_grads_to_norm(ops, layout, grads, norm, max_norm);
    return norm;
}

void average_grads(Ops& ops, const ParamLayout& layout, TensorSet& grads, int64_t microbatches) {
    if (microbatches > 1) scale_grads(ops, layout, grads, 1.0f / static_cast<float>(microbatches));
}

}  // namespace nb

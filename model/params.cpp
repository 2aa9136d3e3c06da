#include "model/params.h"

namespace nb {

const char* param_kind_name(ParamKind kind) {
    switch (kind) {
        case ParamKind::embedding: return "embedding";
        case ParamKind::hidden_matrix: return "hidden_matrix";
        case ParamKind::norm_gain: return "norm_gain";
        case ParamKind::output_head: return "output_head";
    }
    return "?";
}

int ParamLayout::add(ParamInfo info) {
    params_.push_back(std::move(info));
    return size() - 1;
}

int64_t ParamLayout::total_numel() const {
    int64_t n = 0;
    for (const auto& p : params_) n += shape_numel(p.shape);
    return n;
}

int ParamLayout::index_of(const std::string& name) const {
    for (int i = 0; i < size(); ++i)
        if (params_[static_cast<size_t>(i)].name == name) return i;
    return -1;
}

TensorSet TensorSet::zeros(const ParamLayout& layout) {
    TensorSet set;
    for (const auto& p : layout.params()) set.tensors.push_back(Tensor::zeros(p.shape));
    return set;
}

void TensorSet::zero() {
    for (auto& t : tensors) t.zero();
}

}  // namespace nb

#include "model/params.h"

#include "src/ops/ops.h"

namespace nb {

const char* param_kind_name(ParamKind kind) {
    switch (kind) {
        case ParamKind::embedding: return "embedding";
        case ParamKind::hidden_matrix: return "hidden_matrix";
        case ParamKind::norm_gain: return "norm_gain";
        case ParamKind::output_head: return "output_head";
        case ParamKind::expert_bias: return "expert_bias";
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

int64_t ParamLayout::trainable_numel() const {
    int64_t n = 0;
    for (const auto& p : params_)
        if (p.trainable()) n += shape_numel(p.shape);
    return n;
}

int ParamLayout::index_of(const std::string& name) const {
    for (int i = 0; i < size(); ++i)
        if (params_[static_cast<size_t>(i)].name == name) return i;
    return -1;
}

TensorSet TensorSet::zeros(const ParamLayout& layout, DType dtype, Device device) {
    TensorSet set;
    for (const auto& p : layout.params()) set.tensors.push_back(Tensor::zeros(p.shape, dtype, device));
    return set;
}

TensorSet TensorSet::to(Device device) const {
    TensorSet set;
    for (const auto& t : tensors) set.tensors.push_back(t.to(device));
    return set;
}

TrainableParams trainable_params(const ParamLayout& layout) {
    TrainableParams t;
    for (int i = 0; i < layout.size(); ++i) {
        if (!layout[i].trainable()) continue;
        t.layout.add(layout[i]);
        t.index.push_back(i);
    }
    return t;
}

TensorSet select_tensors(const TensorSet& set, const std::vector<int>& index) {
    TensorSet views;
    for (int i : index) views.tensors.push_back(set[i]);
    return views;
}

TensorSet make_compute_weights(Ops& ops, const ParamLayout& layout, const TensorSet& master) {
    if (ops.activation_dtype() == DType::f32) return master;  // shares the tensors
    return make_separate_compute_weights(ops, layout, master);
}

TensorSet make_separate_compute_weights(Ops& ops, const ParamLayout& layout, const TensorSet& master) {
    TensorSet compute;
    for (int i = 0; i < master.size(); ++i) {
        const Tensor& t = master[i];
        // A buffer shares the master's tensor, which refresh_compute_weights then skips.
        compute.tensors.push_back(layout[i].trainable() ? ops.zeros(t.shape(), ops.activation_dtype()) : t);
    }
    refresh_compute_weights(ops, master, compute);
    return compute;
}

void refresh_compute_weights(Ops& ops, const TensorSet& master, TensorSet& compute) {
    for (int i = 0; i < master.size(); ++i) {
        if (compute[i].data() == master[i].data()) continue;  // the same tensor: nothing to refresh
        ops.cast(compute[i], master[i]);
    }
}

void TensorSet::zero() {
    for (auto& t : tensors) t.zero();
}

}  // namespace nb

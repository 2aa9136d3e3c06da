// Parameters as data: a layout (names, shapes, kinds) and tensor sets that follow it.
//
// Weights, gradients and each piece of optimizer state are separate TensorSets over one ParamLayout, so
// a stage's memory is easy to account for and to save. The layout's order is the canonical order: model
// order (embedding, blocks 0..N-1, final norm, head), the order in which weights are hashed and saved.
#pragma once

#include <string>
#include <vector>

#include "src/core/tensor.h"

namespace nb {

// What a parameter is, for optimizers that treat kinds differently (weight decay, Muon's hidden matrices).
enum class ParamKind { embedding, hidden_matrix, norm_gain, output_head };
const char* param_kind_name(ParamKind kind);

struct ParamInfo {
    std::string name;  // e.g. "layers.3.attn.wq"
    Shape shape;
    ParamKind kind;
    // Decoupled weight decay applies to matrices, never to norm gains (as Megatron and nanoGPT do).
    bool weight_decay() const { return kind != ParamKind::norm_gain; }
};

class ParamLayout {
public:
    int add(ParamInfo info);  // returns the parameter's index
    const std::vector<ParamInfo>& params() const { return params_; }
    const ParamInfo& operator[](int i) const { return params_.at(static_cast<size_t>(i)); }
    int size() const { return static_cast<int>(params_.size()); }
    int64_t total_numel() const;
    int index_of(const std::string& name) const;  // -1 if absent

private:
    std::vector<ParamInfo> params_;
};

// One tensor per parameter of a layout, same index.
struct TensorSet {
    std::vector<Tensor> tensors;

    static TensorSet zeros(const ParamLayout& layout, DType dtype = DType::f32, Device device = Device::cpu);
    // The same tensors on `device` (a copy unless they are already there).
    TensorSet to(Device device) const;
    Tensor& operator[](int i) { return tensors.at(static_cast<size_t>(i)); }
    const Tensor& operator[](int i) const { return tensors.at(static_cast<size_t>(i)); }
    int size() const { return static_cast<int>(tensors.size()); }
    void zero();
};

class Ops;

// The weights layers compute with. Where the backend computes in f32 this is the master TensorSet itself (no
// copy); otherwise a copy in the activation dtype, refreshed from the master after every optimizer step.
TensorSet make_compute_weights(Ops& ops, const TensorSet& master);
void refresh_compute_weights(Ops& ops, const TensorSet& master, TensorSet& compute);

}  // namespace nb

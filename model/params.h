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
//
// expert_bias is a BUFFER, not a trainable parameter: an MoE layer's f32 [E] expert bias (aux-loss-free balancing,
// docs/DESIGN.md section 7, model/moe_layer.h), initialised to zero. It lives in the weights TensorSet so that it is
// versioned, checkpointed, hashed and resharded with the weights for free; its slot in the gradients TensorSet
// holds what its update reads instead of a gradient: the expert loads (pairs per expert, f32 counts) summed over
// the step's microbatches. Optimizers, delay fixes, gradient averaging and clipping never see a buffer
// (StageOptimizer runs them over trainable_params()); parameter counts count trainable parameters only.
enum class ParamKind { embedding, hidden_matrix, norm_gain, output_head, expert_bias };
const char* param_kind_name(ParamKind kind);

struct ParamInfo {
    std::string name;  // e.g. "layers.3.attn.wq"
    Shape shape;
    ParamKind kind;
    // Decoupled weight decay applies to matrices, never to norm gains (as Megatron and nanoGPT do).
    bool weight_decay() const { return kind != ParamKind::norm_gain && trainable(); }
    // False for a buffer (state that an optimizer never updates; see ParamKind).
    bool trainable() const { return kind != ParamKind::expert_bias; }
};

class ParamLayout {
public:
    int add(ParamInfo info);  // returns the parameter's index
    const std::vector<ParamInfo>& params() const { return params_; }
    const ParamInfo& operator[](int i) const { return params_.at(static_cast<size_t>(i)); }
    int size() const { return static_cast<int>(params_.size()); }
    int64_t total_numel() const;      // every tensor's elements, buffers included (what the weights occupy)
    int64_t trainable_numel() const;  // the parameter count: buffers left out
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

// The trainable parameters of a layout (every one that is not a buffer), in its order, and where each sits in
// it: for a layout without buffers, the layout itself with index 0, 1, 2, ...
struct TrainableParams {
    ParamLayout layout;
    std::vector<int> index;  // trainable parameter i is layout parameter index[i]
};
TrainableParams trainable_params(const ParamLayout& layout);
// The tensors of `set` at `index`, in that order: views that share their storage (an update through them
// updates `set`).
TensorSet select_tensors(const TensorSet& set, const std::vector<int>& index);

class Ops;

// The weights layers compute with. Where the backend computes in f32 this is the master TensorSet itself (no
// copy); otherwise a copy in the activation dtype, refreshed from the master after every optimizer step. A
// buffer stays the master's f32 tensor in either case (the expert bias is added to f32 probabilities).
TensorSet make_compute_weights(Ops& ops, const ParamLayout& layout, const TensorSet& master);
// The same with storage of its own for the trainable tensors even in f32 (a buffer still shares the master's):
// compute weights that differ from the master (a predicted weight version, optim/delay_fix.h).
TensorSet make_separate_compute_weights(Ops& ops, const ParamLayout& layout, const TensorSet& master);
void refresh_compute_weights(Ops& ops, const TensorSet& master, TensorSet& compute);

}  // namespace nb

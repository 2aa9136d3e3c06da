// Layer: one unit of the model that a pipeline stage holds whole.
//
// The model is a flat list: [Embedding, Block 0, ..., Block N-1, OutputHead]. A pipeline stage is a
// contiguous slice of that list. Each layer has an explicit forward and backward (no autograd tape): forward
// returns its output and fills a Stash with what backward needs for that one microbatch; backward consumes
// the stash. Activation memory of a stage is therefore the stashes it holds in flight.
//
// The backward can also run in two halves over the one stash (zero-bubble schedules, pipeline/schedule/
// schedule.h): backward_input (B: the input gradient, what the stage below needs now) and backward_weight (W: the
// parameter gradients, deferred). Each layer writes its backward once, as backward_pass, with every weight
// product going through WeightGrads (model/weight_grads.h); the fused backward runs each product at once, the
// split one records it. Both give the same bits.
//
// Data between layers is the residual stream x[N, hidden], N = batch * seq_len. The embedding reads token
// ids from the microbatch instead of an input; the head's output is the mean loss as a host [1] tensor, and
// backward's dout for the head is d(objective)/d(mean loss) (1 for one microbatch), also a host [1] tensor.
// Everything else lives on the backend's device, in its activation dtype (see src/ops/ops.h).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/params.h"
#include "model/weight_grads.h"
#include "src/ops/ops.h"

namespace nb {

class MoeObserver;  // model/moe_load.h
class KvCache;      // model/kv_cache.h

struct Microbatch {
    Tensor tokens;   // i32 [batch_size * seq_len], on the backend's device
    Tensor targets;  // i32 [batch_size * seq_len], on the backend's device
    int64_t batch_size = 0;
    int64_t seq_len = 0;
    int64_t rows() const { return batch_size * seq_len; }
};

// What one layer's forward keeps for its backward: each layer names its own fields in a struct derived from this
// (BlockSaved in model/transformer_block.cpp, MoeSaved in model/moe_layer.h, HeadSaved in model/output_head.cpp),
// so that what is kept is chosen by name, not by position.
struct SavedTensors {
    virtual ~SavedTensors() = default;
    virtual size_t bytes() const = 0;  // the defined tensors' bytes
};

// The bytes of the defined tensors among `tensors` (a SavedTensors' bytes()).
template <class... T>
size_t defined_bytes(const T&... tensors) {
    return ((tensors.defined() ? tensors.bytes() : size_t{0}) + ... + size_t{0});
}

// What a layer keeps between forward and backward; after backward_input, only the weight half's products and the
// tensors they read (`saved` is freed then).
struct Stash {
    std::shared_ptr<const SavedTensors> saved;  // null: nothing kept
    std::vector<WeightGradOp> deferred;
    // Full recomputation (model/recompute.h): the forward kept no `saved`, and the backward reruns it first
    // (model/model_step.h); the input the group's first layer keeps for that rerun.
    bool recompute_pending = false;
    Tensor recompute_input;
    // Selective recomputation, set before the forward: keep the GEMM outputs, not what is cheap to make again from
    // them (a block's norm outputs and SwiGLU activation), which the backward recomputes.
    bool selective = false;
    // Full recomputation, set before the output head's forward: keep its input, 1/rms and log-sum-exp, not the
    // logits (N x V), which the backward makes again with the norm and the GEMM (model/recompute.h).
    bool recompute_logits = false;
    size_t bytes() const;  // saved's tensors, the recompute input and the distinct buffers `deferred` reads

    // The layer's own struct; throws when the stash holds none of that type.
    template <class T>
    const T& saved_as() const {
        const T* s = dynamic_cast<const T*>(saved.get());
        if (!s) throw_wrong_saved();
        return *s;
    }

private:
    [[noreturn]] static void throw_wrong_saved();
};

// The tensors a layer reads and writes, handed in by whoever runs it.
struct LayerContext {
    Ops& ops;
    const TensorSet& weights;  // the compute copy (activation dtype; the f32 master itself on the CPU)
    TensorSet* grads;  // null for forward-only (evaluation)
    const Microbatch& batch;
    MoeObserver* moe = nullptr;  // told about each MoE dispatch (model/moe_load.h); null: nobody asks
    // Decoding (model/kv_cache.h): the batch is one sequence of new tokens after the cache's; blocks read and extend
    // the cache; forward only, with no stash.
    KvCache* kv_cache = nullptr;
};

class Layer {
public:
    virtual ~Layer() = default;
    virtual std::string name() const = 0;
    // Returns the output; when `stash` is null nothing is kept (evaluation).
    virtual Tensor forward(const LayerContext& ctx, const Tensor& in, Stash* stash) const = 0;
    // The fused backward: accumulates parameter gradients into ctx.grads and returns d(objective)/d(input)
    // (undefined for the embedding, which has no input). The stash is read, not freed.
    Tensor backward(const LayerContext& ctx, const Tensor& dout, Stash& stash) const;
    // B: returns what backward returns; the parameter gradients wait in stash.deferred, and the forward's saved
    // tensors that they do not read are freed.
    Tensor backward_input(const LayerContext& ctx, const Tensor& dout, Stash& stash) const;
    // W: adds the deferred products into ctx.grads, in the order recorded, and frees the stash. ctx.weights must
    // be the version B used (only shapes are read).
    void backward_weight(const LayerContext& ctx, Stash& stash) const;

protected:
    // The backward, written once: every product that adds to a parameter's gradient goes through `wg`.
    virtual Tensor backward_pass(const LayerContext& ctx, const Tensor& dout, const Stash& stash,
                                 WeightGrads& wg) const = 0;
};

// Constructors register the layer's parameters in `layout`, in canonical order.
std::unique_ptr<Layer> make_embedding_layer(const ModelConfig& config, ParamLayout& layout);
std::unique_ptr<Layer> make_transformer_block(const ModelConfig& config, int64_t block_index, ParamLayout& layout);
// With tied embeddings the head reuses "embedding.weight", which must already be in `layout`.
std::unique_ptr<Layer> make_output_head(const ModelConfig& config, ParamLayout& layout);

}  // namespace nb

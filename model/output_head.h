// What the output head (model/output_head.cpp) keeps between its forward and its backward.
#pragma once

#include "model/layer.h"
#include "model/params.h"

namespace nb {

// n rows: the head's input, the final norm's 1/rms (f32 [n]) and output [n, d], the logits [n, V] and their
// log-sum-exp (f32 [n]).
struct HeadSaved final : SavedTensors {
    Tensor x, rstd, h;
    Tensor logits, lse;
    size_t bytes() const override { return defined_bytes(x, rstd, h, logits, lse); }
};

// The logits [n, V] of rows x [n, d] (the last block's output): the head's final norm and product, as its forward
// computes them before the loss. `weights` are the compute weights of `layout`, a layout holding the head (its
// "final_norm.weight" and "lm_head.weight", or "embedding.weight" when tied). For `eval --dump-logits` and
// generation (src/run/generator.h).
Tensor head_logits(Ops& ops, const ModelConfig& config, const ParamLayout& layout, const TensorSet& weights,
                   const Tensor& x);

}  // namespace nb

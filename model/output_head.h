// What the output head (model/output_head.cpp) keeps between its forward and its backward.
#pragma once

#include "model/layer.h"

namespace nb {

// n rows: the head's input, the final norm's 1/rms (f32 [n]) and output [n, d], the logits [n, V] and their
// log-sum-exp (f32 [n]).
struct HeadSaved final : SavedTensors {
    Tensor x, rstd, h;
    Tensor logits, lse;
    size_t bytes() const override { return defined_bytes(x, rstd, h, logits, lse); }
};

}  // namespace nb

// A model's weights by our parameter names (model/params.h), whole tensors in f32 on the host: what an import
// (a Hugging Face folder, src/run/hf_folder.h) or a checkpoint read for export (src/run/saved_model.h) gives, and
// what a stage or `nobubble eval` takes its initial weights from.
#pragma once

#include <map>
#include <string>

#include "model/params.h"

namespace nb {

using NamedWeights = std::map<std::string, Tensor>;

// `layout`'s tensors taken from `weights` by name (copies, f32 on the host). nb::RuntimeError "'SOURCE': ..." naming
// the first parameter that is missing or whose shape differs. A buffer (the MoE expert bias) absent from `weights`
// starts at zero, as init_weights gives it.
TensorSet weights_for_layout(const ParamLayout& layout, const NamedWeights& weights, const std::string& source);

}  // namespace nb

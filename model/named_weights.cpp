#include "model/named_weights.h"

#include <fmt/format.h>

#include "src/core/error.h"

namespace nb {

TensorSet weights_for_layout(const ParamLayout& layout, const NamedWeights& weights, const std::string& source) {
    TensorSet set = TensorSet::zeros(layout);
    for (int i = 0; i < layout.size(); ++i) {
        const ParamInfo& info = layout[i];
        const auto it = weights.find(info.name);
        if (it == weights.end()) {
            if (!info.trainable()) continue;
            throw RuntimeError(fmt::format("'{}': no weights for parameter '{}' {}", source, info.name,
                                           shape_string(info.shape)));
        }
        const Tensor& t = it->second;
        if (t.shape() != info.shape || t.dtype() != DType::f32)
            throw RuntimeError(fmt::format("'{}': parameter '{}' is {} {}, the model's is f32 {}", source, info.name,
                                           dtype_name(t.dtype()), shape_string(t.shape()), shape_string(info.shape)));
        set[i].copy_from(t);
    }
    return set;
}

}  // namespace nb

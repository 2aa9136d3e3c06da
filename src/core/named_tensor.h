// A tensor with its canonical name, as a tensor file holds it (src/core/safetensors.h, src/core/tensor_file.h).
#pragma once

#include <string>

#include "src/core/tensor.h"

namespace nb {

struct NamedTensor {
    std::string name;
    Tensor tensor;  // on the host
};

}  // namespace nb

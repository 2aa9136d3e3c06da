// Choosing the op backend: `--device cpu` (the f32 reference) or `--device cuda` (bf16 compute, f32 master).
#pragma once

#include <memory>
#include <string>

#include "src/ops/ops.h"

namespace nb {

Device parse_device(const std::string& name);  // kDevices.parse (src/core/tensor.h)
// Starts the backend; RuntimeError naming the CUDA error where no GPU is usable or CUDA was not built.
std::unique_ptr<Ops> make_ops(Device device);

}  // namespace nb

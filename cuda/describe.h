// How the CUDA ops name a tensor in their argument errors, and their dtype/device test, shared by every cuda/*.cu
// op (no fmt in .cu files: nvcc 13 rejects fmt 9's consteval format-string checks). The shape contracts are the
// CPU's, in src/ops/layer_checks.h; these cover what only this backend asks.
#pragma once

#include <stdexcept>
#include <string>

#include "src/core/tensor.h"

namespace nb::cuda {

// "[2, 3] bf16 on cuda", or "(undefined)".
inline std::string describe(const Tensor& t) {
    if (!t.defined()) return "(undefined)";
    return shape_string(t.shape()) + " " + dtype_name(t.dtype()) + " on " + device_name(t.device());
}

// Whether t is defined, of `dtype` and on the GPU.
inline bool on_cuda(const Tensor& t, DType dtype) {
    return t.defined() && t.dtype() == dtype && t.device() == Device::cuda;
}

// This backend's dtype and device, after the shapes (the CPU's rule, src/ops/layer_checks.h): an
// std::invalid_argument naming the op and the tensor otherwise.
inline void require_cuda(const char* op, const char* name, const Tensor& t, DType dtype) {
    if (t.device() != Device::cuda || t.dtype() != dtype)
        throw std::invalid_argument(std::string(op) + ": " + name + " must be a " + dtype_name(dtype) +
                                    " CUDA tensor, got " + describe(t));
}

}  // namespace nb::cuda

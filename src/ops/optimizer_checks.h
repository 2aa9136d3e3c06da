// Argument checks shared by both backends' optimizer kernels (src/cpu/*.cpp, cuda/*.cu): every tensor an
// optimizer kernel touches is f32, on the backend's device, with one element count. Header-only so that the CUDA
// library needs nothing from the core library's objects for it.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <vector>

#include "src/core/tensor.h"

namespace nb {

struct NamedTensor {
    const char* name;
    const Tensor* tensor;
};

// std::invalid_argument naming `op` and the tensor unless each tensor is defined, f32, on `device`, and has the
// element count of the first.
inline void check_optimizer_tensors(const char* op, Device device, std::initializer_list<NamedTensor> tensors) {
    const Tensor* first = tensors.begin()->tensor;
    for (const NamedTensor& t : tensors) {
        const Tensor& x = *t.tensor;
        const bool ok = x.defined() && x.dtype() == DType::f32 && x.device() == device &&
                        (!first->defined() || x.numel() == first->numel());
        if (ok) continue;
        const std::string got = x.defined() ? shape_string(x.shape()) + " " + dtype_name(x.dtype()) + " on " +
                                                  device_name(x.device())
                                            : std::string("undefined");
        throw std::invalid_argument(std::string(op) + ": " + t.name + " must be an f32 " + device_name(device) +
                                    " tensor with the element count of " + tensors.begin()->name + " (" +
                                    (first->defined() ? shape_string(first->shape()) : std::string("undefined")) +
                                    "), got " + got);
    }
}

// std::invalid_argument naming `op` unless `step` counts from 1, as torch's AdamW does (bias corrections divide
// by 1 - beta^step).
inline void check_adamw_step(const char* op, int64_t step) {
    if (step < 1)
        throw std::invalid_argument(std::string(op) + ": step " + std::to_string(step) +
                                    " must be >= 1 (torch counts from 1)");
}

// The shape shared by a batch of matrices (Ops::newton_schulz).
struct MatrixBatch {
    int64_t rows = 0, cols = 0;
};

// std::invalid_argument naming `op` unless `outs` and `ins` are equally many (at least one) f32 [rows, cols]
// matrices on `device`, all of one shape.
inline MatrixBatch check_matrix_batch(const char* op, Device device, const std::vector<Tensor*>& outs,
                                      const std::vector<const Tensor*>& ins) {
    if (ins.empty() || outs.size() != ins.size())
        throw std::invalid_argument(std::string(op) + ": " + std::to_string(outs.size()) + " outputs for " +
                                    std::to_string(ins.size()) + " inputs (one each, at least one)");
    if (!ins[0] || ins[0]->rank() != 2)
        throw std::invalid_argument(std::string(op) + ": the inputs must be [rows, cols] matrices, got " +
                                    (ins[0] ? shape_string(ins[0]->shape()) : std::string("null")));
    const Shape& shape = ins[0]->shape();
    for (size_t i = 0; i < ins.size(); ++i) {
        if (!ins[i] || !outs[i] || ins[i]->shape() != shape || outs[i]->shape() != shape)
            throw std::invalid_argument(std::string(op) + ": matrix " + std::to_string(i) +
                                        " differs from the batch's shape " + shape_string(shape));
        check_optimizer_tensors(op, device, {{"input", ins[i]}, {"output", outs[i]}});
    }
    return {shape[0], shape[1]};
}

}  // namespace nb

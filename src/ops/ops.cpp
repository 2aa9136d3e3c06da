#include "src/ops/ops.h"

#include "src/ops/op_profiler.h"

namespace nb {

Tensor OpsCore::zeros(const Shape& shape, DType dtype) {
    const OpTimer timer(*this, "zeros (allocate + clear)");
    return Tensor::zeros(shape, dtype, device());
}

Tensor OpsCore::empty(const Shape& shape, DType dtype) {
    const OpTimer timer(*this, "empty (allocate)");
    return Tensor::empty(shape, dtype, device());
}

}  // namespace nb

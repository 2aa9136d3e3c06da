#include "cuda/context.h"
#include "cuda/cuda_check.h"
#include "cuda/cuda_ops.h"

namespace nb::cuda {

void CudaOps::synchronize() { CUDA_CHECK(cudaStreamSynchronize(context().stream)); }

int64_t device_memory_used_bytes() {
    size_t free_bytes = 0, total_bytes = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    return static_cast<int64_t>(total_bytes - free_bytes);
}

}  // namespace nb::cuda

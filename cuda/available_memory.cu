// What the GPU can still give this process: cudaMemGetInfo's free bytes on the context's device. Before a run's
// stages allocate, nobubble's caching allocator (cuda/memory.cu) holds nothing, so this is all there is.
#include <string>

#include "cuda/context.h"
#include "cuda/cuda_check.h"
#include "cuda/cuda_ops.h"

namespace nb::cuda {

std::optional<AvailableMemory> CudaOps::available_memory() const {
    const CudaContext& ctx = *ctx_;
    CUDA_CHECK(cudaSetDevice(ctx.device));  // cudaMemGetInfo answers for the calling thread's current device
    size_t free_bytes = 0, total_bytes = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    return AvailableMemory{static_cast<int64_t>(free_bytes),
                           " is free on GPU " + std::to_string(ctx.device) + " (cudaMemGetInfo)"};
}

}  // namespace nb::cuda

// CudaContext: what every CUDA op needs besides its tensors: the device, the one stream all kernels run on,
// the cuBLASLt handle and its workspace, and the caching device allocator.
//
// Created by CudaOps::CudaOps() (cuda/context.cu). Only ONE CudaOps per process is supported: it registers its
// allocator as the process-wide nb::DeviceMemory (src/core/device_memory.h) and unregisters it when destroyed, so
// device tensors must not outlive it.
//
// Kernels: launch on `ops.context().stream` (e.g. `k<<<grid, block, 0, ctx.stream>>>(...)` then
// CUDA_CHECK_LAUNCH()). Never use the legacy default stream: the stream is non-blocking and every copy and
// memset of the allocator goes through it too, so stream order alone orders everything.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "cuda/cuda_ops.h"
#include "src/core/device_memory.h"

namespace nb::cuda {

class CachingDeviceMemory;  // cuda/memory.cu
struct LinearPlanCache;     // cuda/linear.cu: cached cuBLASLt descriptors per GEMM shape
struct NewtonSchulzPlans;   // cuda/newton_schulz.cu: cached batched cuBLASLt plans per matrix shape
struct AttentionPlanCache;  // cuda/attention_cudnn.cu: cuDNN handle, attention plans per shape, the choice
struct LinalgHandles;       // cuda/linalg.cu: cuBLAS (plain f32) and cuSOLVER handles for optimizer linear algebra

struct CudaContext {
    int device = 0;                      // CUDA device index (the process's local rank)
    cudaStream_t stream = nullptr;       // non-blocking; every kernel, memset and copy runs on it
    cublasLtHandle_t lt = nullptr;       // cuBLASLt handle
    void* workspace = nullptr;           // cuBLASLt workspace (cudaMalloc'd, not from the cache)
    size_t workspace_bytes = 0;          // 32 MiB
    std::string device_name;             // e.g. "NVIDIA H200"
    int compute_capability = 0;          // e.g. 90
    int multiprocessors = 0;             // SM count (to size grids)
    CachingDeviceMemory* memory = nullptr;   // the registered nb::DeviceMemory (owned; memory.cu)
    LinearPlanCache* linear_plans = nullptr;  // owned; created lazily by linear.cu
    NewtonSchulzPlans* newton_schulz_plans = nullptr;  // owned; created lazily by newton_schulz.cu
    AttentionPlanCache* attention_plans = nullptr;  // owned; created lazily by attention_cudnn.cu
    LinalgHandles* linalg = nullptr;          // owned; created lazily by linalg.cu
    bool memory_registered = false;           // memory is the process's nb::DeviceMemory

    // A device scratch buffer of at least `bytes` (grown on demand, kept for the context's life). For short-
    // lived per-call scratch such as reduction partials; its contents are only valid within one op (ops are
    // serialised on `stream`).
    void* scratch(size_t bytes);
    void* scratch_ptr = nullptr;
    size_t scratch_bytes = 0;

    CudaContext() = default;
    CudaContext(const CudaContext&) = delete;
    CudaContext& operator=(const CudaContext&) = delete;
    ~CudaContext();
};

// Owned-pointer helpers (the types are private to their .cu files; called from context.cu).
CachingDeviceMemory* create_device_memory(int device, cudaStream_t stream);  // memory.cu
void destroy_device_memory(CachingDeviceMemory* memory) noexcept;           // memory.cu: frees every block
DeviceMemory* as_device_memory(CachingDeviceMemory* memory) noexcept;       // memory.cu
void destroy_linear_plans(LinearPlanCache* cache) noexcept;                 // linear.cu
void destroy_newton_schulz_plans(NewtonSchulzPlans* cache) noexcept;       // newton_schulz.cu
void destroy_attention_plans(AttentionPlanCache* cache) noexcept;           // attention_cudnn.cu
void destroy_linalg_handles(LinalgHandles* handles) noexcept;               // linalg.cu

// Allocator hook for the out-of-memory message: e.g. set_oom_context("stage 2") makes an OOM read
// "CUDA out of memory (stage 2): ...". Empty string clears it. Process-wide.
void set_oom_context(std::string context);

// Bytes currently held by the caching allocator (in use + cached), for diagnostics; 0 without a CudaOps.
size_t device_memory_held_bytes();

}  // namespace nb::cuda

// CudaOps construction and teardown: device choice, stream, cuBLASLt handle and workspace, and the caching
// allocator registered as the process's nb::DeviceMemory.
//
// Only ONE CudaOps may exist at a time in a process (the allocator registration is process-wide); constructing
// a second while the first lives is a RuntimeError.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdlib>
#include <string>

#include "cuda/context.h"
#include "cuda/cuda_check.h"
#include "cuda/cuda_ops.h"
#include "src/core/device_memory.h"
#include "src/core/error.h"

namespace nb::cuda {

namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;  // cuBLASLt workspace: 32 MiB (Hopper kernels want >= 32 MiB)

std::atomic<int> g_live_contexts{0};

// The process's rank on this node, from the launcher's environment (Open MPI, Slurm, MPICH/Intel MPI), else 0.
int local_rank_from_env(std::string& source) {
    for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID"}) {
        const char* v = std::getenv(name);
        if (!v || !*v) continue;
        char* end = nullptr;
        const long r = std::strtol(v, &end, 10);
        if (*end != '\0' || r < 0 || r > 1 << 20)
            throw RuntimeError(std::string("--device cuda: cannot read the local rank from ") + name + "='" + v + "'");
        source = name;
        return static_cast<int>(r);
    }
    source = "default";
    return 0;
}

}  // namespace

void* CudaContext::scratch(size_t bytes) {
    if (bytes <= scratch_bytes && scratch_ptr) return scratch_ptr;
    // Grow through the caching allocator, not cudaMalloc/cudaFree: cudaFree waits for the whole device, NCCL
    // transfers included, and two neighbouring stages each freeing while its send waits for the other's receive
    // would wait for each other forever. The allocator hands the old block out again only to work queued after
    // the kernels that still read it (one stream), so no wait is needed either.
    DeviceMemory* provider = as_device_memory(memory);
    if (scratch_ptr) provider->release(scratch_ptr, scratch_bytes);
    scratch_ptr = nullptr;
    scratch_bytes = 0;
    const size_t rounded = (bytes + (size_t{1} << 20) - 1) & ~((size_t{1} << 20) - 1);  // whole MiB
    scratch_ptr = provider->allocate(rounded);
    scratch_bytes = rounded;
    return scratch_ptr;
}

// Every member may be missing (a constructor that failed half way destroys a partial context): check each.
// Errors are ignored here: a destructor must not throw, and at process exit the driver reclaims everything.
CudaContext::~CudaContext() {
    if (stream) cudaStreamSynchronize(stream);
    if (memory_registered) register_device_memory(nullptr);
    if (linear_plans) destroy_linear_plans(linear_plans);
    if (newton_schulz_plans) destroy_newton_schulz_plans(newton_schulz_plans);
    if (attention_plans) destroy_attention_plans(attention_plans);
    if (linalg) destroy_linalg_handles(linalg);
    if (memory && scratch_ptr) as_device_memory(memory)->release(scratch_ptr, scratch_bytes);  // not a leak
    if (memory) destroy_device_memory(memory);
    if (workspace) cudaFree(workspace);
    if (lt) cublasLtDestroy(lt);
    if (stream) cudaStreamDestroy(stream);
    cudaGetLastError();
}

CudaOps::CudaOps() {
    if (g_live_contexts.fetch_add(1) != 0) {
        g_live_contexts.fetch_sub(1);
        throw RuntimeError("--device cuda: only one CUDA backend (CudaOps) per process is supported");
    }
    try {
        int count = 0;
        const cudaError_t err = cudaGetDeviceCount(&count);
        if (err != cudaSuccess) {
            cudaGetLastError();  // clear it
            throw RuntimeError(std::string("--device cuda: no usable GPU (") + cudaGetErrorName(err) + ": " +
                               cudaGetErrorString(err) + ")");
        }
        if (count <= 0) throw RuntimeError("--device cuda: no usable GPU (cudaGetDeviceCount reports 0 devices)");
        std::string source;
        const int rank = local_rank_from_env(source);
        if (rank >= count) {
            const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
            throw RuntimeError("--device cuda: local rank " + std::to_string(rank) + " needs GPU " +
                               std::to_string(rank) + " but this node has " + std::to_string(count) + " (rank from " +
                               source + (visible ? std::string(", CUDA_VISIBLE_DEVICES=") + visible : std::string()) +
                               ")");
        }

        ctx_ = std::make_unique<CudaContext>();
        CudaContext& c = *ctx_;
        c.device = rank;
        CUDA_CHECK(cudaSetDevice(rank));
        cudaDeviceProp prop{};
        CUDA_CHECK(cudaGetDeviceProperties(&prop, rank));
        c.device_name = prop.name;
        c.compute_capability = prop.major * 10 + prop.minor;
        c.multiprocessors = prop.multiProcessorCount;

        CUDA_CHECK(cudaStreamCreateWithFlags(&c.stream, cudaStreamNonBlocking));
        CUBLAS_CHECK(cublasLtCreate(&c.lt));
        CUDA_CHECK(cudaMalloc(&c.workspace, kWorkspaceBytes));
        c.workspace_bytes = kWorkspaceBytes;

        c.memory = create_device_memory(c.device, c.stream);
        register_device_memory(as_device_memory(c.memory));
        c.memory_registered = true;
    } catch (...) {
        ctx_.reset();  // releases whatever was created
        g_live_contexts.fetch_sub(1);
        throw;
    }
}

CudaOps::~CudaOps() {
    ctx_.reset();
    g_live_contexts.fetch_sub(1);
}

std::unique_ptr<Ops> make_cuda_ops() { return std::make_unique<CudaOps>(); }

}  // namespace nb::cuda

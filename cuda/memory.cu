// The caching device allocator behind every Device::cuda tensor (nb::DeviceMemory, src/core/device_memory.h).
//
// - Blocks come from cudaMalloc (never managed memory), sizes rounded up to 512 bytes; a released block goes
//   to the free list of its rounded size and is handed out again, last released first, to the next request
//   of that size. Nothing is given back to CUDA during training (cudaFree synchronises the device); all
//   blocks are freed when the allocator is destroyed (with the CudaOps that owns it).
// - Reuse is safe because every kernel, memset and copy runs on the context's one stream: a block released
//   while a kernel that reads it is still queued is only written again by work queued after that kernel.
//   (Work on another stream that uses a tensor must be ordered against this stream by whoever adds it.)
// - zero(): cudaMemsetAsync on the stream. copy(): cudaMemcpyAsync on the stream, then cudaStreamSynchronize,
//   so a copy to the host returns with the data and sees every op issued before it.
// - Out of memory: the cached blocks are freed and the cudaMalloc retried once; if it still fails, a
//   RuntimeError "CUDA out of memory (<context>): tried to allocate X MiB, Y MiB free of Z MiB (cudaMemGetInfo),
//   N MiB held by nobubble's allocator in live tensors". The pipeline drivers put the stage in front of every
//   error a stage raises ("stage 2: ...", "rank 2 (stage 2): ..."), so the message names the stage; an optional
//   label of the caller's own goes in the parentheses (set_oom_context, cuda/context.h).
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "cuda/context.h"
#include "cuda/cuda_check.h"
#include "src/core/device_memory.h"
#include "src/core/error.h"

namespace nb::cuda {

namespace {

constexpr size_t kGranule = 512;

std::mutex g_oom_mutex;
std::string g_oom_context;

std::string oom_context() {
    std::lock_guard<std::mutex> lock(g_oom_mutex);
    return g_oom_context;
}

std::string mib(size_t bytes) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.1f", static_cast<double>(bytes) / (1024.0 * 1024.0));
    return buf;
}

}  // namespace

class CachingDeviceMemory final : public DeviceMemory {
public:
    CachingDeviceMemory(int device, cudaStream_t stream) : device_(device), stream_(stream) {}
    ~CachingDeviceMemory() override;

    void* allocate(size_t bytes) override;
    void release(void* ptr, size_t bytes) noexcept override;
    void zero(void* ptr, size_t bytes) override;
    void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) override;

    size_t held_bytes() {
        std::lock_guard<std::mutex> lock(mutex_);
        return in_use_bytes_ + cached_bytes_;
    }

private:
    void free_cached_locked();  // cudaFree every cached block (mutex_ held)

    int device_;
    cudaStream_t stream_;
    std::mutex mutex_;
    std::unordered_map<size_t, std::vector<void*>> free_lists_;  // rounded size -> cached blocks
    std::unordered_map<void*, size_t> live_;                      // handed-out block -> rounded size
    size_t in_use_bytes_ = 0;
    size_t cached_bytes_ = 0;
};

namespace {
CachingDeviceMemory* g_memory = nullptr;  // the live allocator (one CudaOps per process)
}

void* CachingDeviceMemory::allocate(size_t bytes) {
    if (bytes > SIZE_MAX - kGranule)
        throw RuntimeError("CUDA out of memory: tried to allocate " + std::to_string(bytes) + " bytes");
    // Zero-byte tensors still get a real (one-granule) block, so data() is never null on the device.
    const size_t rounded = bytes == 0 ? kGranule : (bytes + kGranule - 1) / kGranule * kGranule;
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = free_lists_.find(rounded);
    if (it != free_lists_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        cached_bytes_ -= rounded;
        in_use_bytes_ += rounded;
        live_.emplace(p, rounded);
        return p;
    }
    void* p = nullptr;
    cudaError_t err = cudaMalloc(&p, rounded);
    if (err == cudaErrorMemoryAllocation) {
        cudaGetLastError();  // clear it (not sticky)
        free_cached_locked();
        p = nullptr;
        err = cudaMalloc(&p, rounded);
        if (err == cudaErrorMemoryAllocation) {
            cudaGetLastError();
            size_t free_b = 0, total_b = 0;
            const bool have_info = cudaMemGetInfo(&free_b, &total_b) == cudaSuccess;
            cudaGetLastError();
            const std::string where = oom_context();
            std::string msg = "CUDA out of memory" + (where.empty() ? std::string() : " (" + where + ")") +
                              ": tried to allocate " + mib(rounded) + " MiB, ";
            msg += have_info ? mib(free_b) + " MiB free of " + mib(total_b) + " MiB (cudaMemGetInfo)"
                             : std::string("cudaMemGetInfo failed");
            msg += ", " + mib(in_use_bytes_) + " MiB held by nobubble's allocator in live tensors (its cache of " +
                   "free blocks was emptied before retrying)";
            throw RuntimeError(msg);
        }
    }
    if (err != cudaSuccess) throw_cuda_error(err, "cudaMalloc", __FILE__, __LINE__);
    in_use_bytes_ += rounded;
    live_.emplace(p, rounded);
    return p;
}

void CachingDeviceMemory::release(void* ptr, size_t bytes) noexcept {
    (void)bytes;  // the size recorded at allocation is the one that counts
    if (!ptr) return;
    try {
        std::lock_guard<std::mutex> lock(mutex_);
        auto it = live_.find(ptr);
        if (it == live_.end()) {
            std::fprintf(stderr, "nobubble: warning: CUDA allocator asked to release an unknown block %p\n", ptr);
            return;
        }
        const size_t rounded = it->second;
        live_.erase(it);
        in_use_bytes_ -= rounded;
        cached_bytes_ += rounded;
        free_lists_[rounded].push_back(ptr);
    } catch (...) {
        // push_back could throw bad_alloc: the block is then leaked, never reused while possibly in use.
    }
}

void CachingDeviceMemory::zero(void* ptr, size_t bytes) {
    if (bytes == 0) return;
    CUDA_CHECK(cudaMemsetAsync(ptr, 0, bytes, stream_));
}

void CachingDeviceMemory::copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
    if (bytes == 0) return;
    if (dst_device == Device::cpu && src_device == Device::cpu) {
        std::memmove(dst, src, bytes);
        return;
    }
    cudaMemcpyKind kind;
    if (dst_device == Device::cuda && src_device == Device::cuda)
        kind = cudaMemcpyDeviceToDevice;
    else if (dst_device == Device::cuda)
        kind = cudaMemcpyHostToDevice;
    else
        kind = cudaMemcpyDeviceToHost;
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CachingDeviceMemory::free_cached_locked() {
    // Cached blocks may still be read by queued kernels (released in stream order): wait for them first.
    cudaStreamSynchronize(stream_);
    for (auto& [size, blocks] : free_lists_) {
        for (void* p : blocks) cudaFree(p);
        blocks.clear();
    }
    free_lists_.clear();
    cached_bytes_ = 0;
    cudaGetLastError();
}

CachingDeviceMemory::~CachingDeviceMemory() {
    // Errors ignored: a destructor must not throw, and at exit the driver reclaims everything anyway.
    std::lock_guard<std::mutex> lock(mutex_);
    free_cached_locked();
    if (!live_.empty())
        std::fprintf(stderr, "nobubble: warning: %zu CUDA tensor block(s) (%s MiB) still alive when the backend stopped\n",
                     live_.size(), mib(in_use_bytes_).c_str());
    for (auto& [p, size] : live_) cudaFree(p);
    live_.clear();
    in_use_bytes_ = 0;
    cudaGetLastError();
    (void)device_;
}

CachingDeviceMemory* create_device_memory(int device, cudaStream_t stream) {
    auto* m = new CachingDeviceMemory(device, stream);
    g_memory = m;
    return m;
}

void destroy_device_memory(CachingDeviceMemory* memory) noexcept {
    if (g_memory == memory) g_memory = nullptr;
    delete memory;
}

DeviceMemory* as_device_memory(CachingDeviceMemory* memory) noexcept { return memory; }

void set_oom_context(std::string context) {
    std::lock_guard<std::mutex> lock(g_oom_mutex);
    g_oom_context = std::move(context);
}

size_t device_memory_held_bytes() { return g_memory ? g_memory->held_bytes() : 0; }

}  // namespace nb::cuda

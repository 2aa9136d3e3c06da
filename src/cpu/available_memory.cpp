// The CPU backend's memory is the host's: the kernel's MemAvailable (src/core/host_memory.h).
#include "src/core/host_memory.h"
#include "src/cpu/cpu_ops.h"

namespace nb {

std::optional<AvailableMemory> CpuOps::available_memory() const {
    const std::optional<int64_t> bytes = host_memory_available_bytes();
    if (!bytes) return std::nullopt;
    return AvailableMemory{*bytes, " of host memory is available (MemAvailable)"};
}

}  // namespace nb

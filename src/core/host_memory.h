// How much host memory a run may still allocate: the kernel's MemAvailable (/proc/meminfo), its estimate of what
// can be allocated without swapping (free memory plus the page cache and slabs it can reclaim). MemFree alone
// would count a machine whose RAM holds a large page cache as full.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace nb {

// MemAvailable in bytes; nullopt where /proc/meminfo or its line is missing (not Linux, an old kernel).
std::optional<int64_t> host_memory_available_bytes();

// The same, from the text of /proc/meminfo (its line reads "MemAvailable:   23665192 kB", kB meaning KiB).
std::optional<int64_t> parse_mem_available_bytes(std::string_view meminfo);

}  // namespace nb

// A caching allocator for host tensors.
//
// Why: a training step allocates the same activation and gradient shapes every time. Returning big blocks to
// the C library unmaps them, and the next step pays page faults to map and zero them again (a third of the
// step's time on the `tiny` model). Freed blocks are kept in per-size free lists and handed out again, like
// PyTorch's caching allocators. Memory held is bounded by the peak of live tensors.
#pragma once

#include <cstddef>

namespace nb {

// 64-byte aligned, at least `bytes` long; contents undefined.
void* host_allocate(size_t bytes);
// Returns a block from host_allocate with the same `bytes` to the cache.
void host_free(void* ptr, size_t bytes) noexcept;
// Bytes currently held in free lists (not in use).
size_t host_cached_bytes();
// Test-only (train's --host-memory-limit): host_allocate throws std::bad_alloc, as an exhausted machine does,
// once the blocks it took from the C library would pass `bytes` in all (0: no limit).
void set_host_memory_limit_bytes(size_t bytes);

}  // namespace nb

#include "src/core/host_allocator.h"

#include <cstdlib>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

namespace nb {

namespace {

constexpr size_t kAlignment = 64;

// Blocks are grouped by their size rounded up to the alignment; a request is served only by a block of
// exactly its rounded size, so nothing is wasted and lookups are O(1).
struct FreeLists {
    std::mutex mutex;
    std::unordered_map<size_t, std::vector<void*>> by_size;
    size_t cached_bytes = 0;
    size_t system_bytes = 0;  // taken from the C library so far (blocks are cached, never given back)
    size_t limit_bytes = 0;   // test-only (set_host_memory_limit_bytes); 0: none
};

FreeLists& free_lists() {
    static FreeLists* lists = new FreeLists();  // never destroyed: tensors may outlive static destructors
    return *lists;
}

size_t rounded(size_t bytes) { return bytes == 0 ? kAlignment : (bytes + kAlignment - 1) / kAlignment * kAlignment; }

}  // namespace

void* host_allocate(size_t bytes) {
    const size_t size = rounded(bytes);
    FreeLists& lists = free_lists();
    {
        std::lock_guard<std::mutex> lock(lists.mutex);
        auto it = lists.by_size.find(size);
        if (it != lists.by_size.end() && !it->second.empty()) {
            void* p = it->second.back();
            it->second.pop_back();
            lists.cached_bytes -= size;
            return p;
        }
        if (lists.limit_bytes > 0 && lists.system_bytes + size > lists.limit_bytes) throw std::bad_alloc();
        lists.system_bytes += size;
    }
    void* p = std::aligned_alloc(kAlignment, size);
    if (!p) throw std::bad_alloc();
    return p;
}

void host_free(void* ptr, size_t bytes) noexcept {
    if (!ptr) return;
    const size_t size = rounded(bytes);
    FreeLists& lists = free_lists();
    std::lock_guard<std::mutex> lock(lists.mutex);
    try {
        lists.by_size[size].push_back(ptr);
        lists.cached_bytes += size;
    } catch (...) {
        std::free(ptr);  // out of memory for the bookkeeping: give the block back instead
    }
}

size_t host_cached_bytes() {
    FreeLists& lists = free_lists();
    std::lock_guard<std::mutex> lock(lists.mutex);
    return lists.cached_bytes;
}

void set_host_memory_limit_bytes(size_t bytes) {
    FreeLists& lists = free_lists();
    std::lock_guard<std::mutex> lock(lists.mutex);
    lists.limit_bytes = bytes;
}

}  // namespace nb

#include "pipeline/transport/replica_sum.h"

namespace nb {

std::vector<SlotBucket> bucket_slots(const std::vector<Tensor>& slots, size_t max_bytes) {
    std::vector<SlotBucket> buckets;
    const int n = static_cast<int>(slots.size());
    for (int i = 0; i < n;) {
        SlotBucket b;
        b.first = i;
        size_t bytes = 0;
        do bytes += slots[static_cast<size_t>(i++)].bytes();
        while (i < n && bytes + slots[static_cast<size_t>(i)].bytes() <= max_bytes);
        b.end = i;
        buckets.push_back(b);
    }
    return buckets;
}

}  // namespace nb

// CUDA device discovery (compiled only when the CUDA backend is built: NOBUBBLE_HAVE_CUDA).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace nb::cuda {

struct DeviceInfo {
    int index;
    std::string name;
    int compute_capability;  // e.g. 90 for Hopper
    int64_t memory_bytes;
    int multiprocessors;
};

struct DeviceQuery {
    std::vector<DeviceInfo> devices;
    std::string error;  // why there is no usable device; empty when devices is not empty
};

DeviceQuery query_devices();

}  // namespace nb::cuda

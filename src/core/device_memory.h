// Memory on an accelerator, as the Tensor type sees it.
//
// Tensor lives in src/ and must build without CUDA, so it does not call the CUDA runtime itself: the CUDA
// backend registers a DeviceMemory when it starts, and tensors on Device::cuda allocate, zero and copy
// through it. Without a registered provider, creating a device tensor is a RuntimeError.
#pragma once

#include <cstddef>

#include "src/core/tensor.h"

namespace nb {

class DeviceMemory {
public:
    virtual ~DeviceMemory() = default;
    virtual void* allocate(size_t bytes) = 0;  // throws RuntimeError naming the size and what is free
    virtual void release(void* ptr, size_t bytes) noexcept = 0;
    virtual void zero(void* ptr, size_t bytes) = 0;
    // Copies between any two of host and device memory; returns when the copy is complete.
    virtual void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) = 0;
};

void register_device_memory(DeviceMemory* memory);  // nullptr unregisters
DeviceMemory& device_memory();                       // the registered provider, or RuntimeError

}  // namespace nb

// Tensor: a shaped view of a reference-counted buffer.
//
// Why so small: layers and ops need shape, element type and a pointer; everything else (autograd, strides,
// broadcasting) is deliberately absent. Views share storage, so a stash can keep an activation alive
// without copying it. Storage lives on one device: host memory (caching allocator) or an accelerator's,
// through the DeviceMemory its backend registers (src/core/device_memory.h). Element access from C++ (f32(),
// i32()) is for host tensors only; kernels take data().
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "src/core/name_table.h"

namespace nb {

enum class Device : uint8_t { cpu, cuda };
inline constexpr auto kDevices = name_table<Device>("--device", {
    {"cpu", Device::cpu, "f32 reference"},
    {"cuda", Device::cuda, "bf16 compute, f32 master weights"},
});
enum class DType : uint8_t { f32, bf16, i32 };
const char* device_name(Device device);

size_t dtype_bytes(DType dtype);
const char* dtype_name(DType dtype);

using Shape = std::vector<int64_t>;
std::string shape_string(const Shape& shape);
int64_t shape_numel(const Shape& shape);

class Tensor {
public:
    Tensor() = default;

    // A new zero-filled tensor.
    static Tensor zeros(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu);
    // A new tensor whose contents are undefined (for outputs an op overwrites entirely: saves clearing memory).
    static Tensor empty(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu);

    bool defined() const { return storage_ != nullptr; }
    const Shape& shape() const { return shape_; }
    int rank() const { return static_cast<int>(shape_.size()); }
    int64_t dim(int i) const;  // negative i counts from the end
    int64_t numel() const { return shape_numel(shape_); }
    size_t bytes() const { return static_cast<size_t>(numel()) * dtype_bytes(dtype_); }
    DType dtype() const { return dtype_; }
    Device device() const { return device_; }

    // Raw storage pointer on the tensor's device (for kernels and copies).
    void* data() { return raw(); }
    const void* data() const { return raw(); }

    // Typed host access; throws if the dtype does not match or the tensor is not on the host.
    float* f32();
    const float* f32() const;
    int32_t* i32();
    const int32_t* i32() const;

    // Same storage, new shape with the same element count.
    Tensor reshaped(const Shape& shape) const;
    // A view of rows [begin, end) along the first dimension.
    Tensor rows(int64_t begin, int64_t end) const;

    void zero();
    void fill(float value);  // host f32 only
    // Element-wise copy from a tensor of the same dtype and element count, on any device.
    void copy_from(const Tensor& other);
    Tensor clone() const;
    // A copy on `device` (this tensor itself if it is already there).
    Tensor to(Device device) const;

private:
    struct Storage;
    std::shared_ptr<Storage> storage_;
    size_t offset_bytes_ = 0;
    Shape shape_;
    DType dtype_ = DType::f32;
    Device device_ = Device::cpu;
    static Tensor allocate(const Shape& shape, DType dtype, Device device, bool clear);
    void* raw() const;
    void* host_raw(const char* accessor) const;
};

}  // namespace nb

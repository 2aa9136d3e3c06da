#include "src/core/tensor.h"

#include "src/core/device_memory.h"
#include "src/core/error.h"
#include "src/core/host_allocator.h"

#include <cstring>
#include <new>
#include <stdexcept>

#include <fmt/format.h>

namespace nb {

size_t dtype_bytes(DType dtype) {
    switch (dtype) {
        case DType::f32: return 4;
        case DType::bf16: return 2;
        case DType::i32: return 4;
    }
    return 0;
}

const char* dtype_name(DType dtype) {
    switch (dtype) {
        case DType::f32: return "f32";
        case DType::bf16: return "bf16";
        case DType::i32: return "i32";
    }
    return "?";
}

// The table's names are string literals, so data() is NUL-terminated.
const char* device_name(Device device) { return kDevices.name(device).data(); }

namespace {

DeviceMemory* g_device_memory = nullptr;

}  // namespace

void register_device_memory(DeviceMemory* memory) { g_device_memory = memory; }

DeviceMemory& device_memory() {
    if (!g_device_memory) throw RuntimeError("no accelerator backend is running (this build or run has no CUDA)");
    return *g_device_memory;
}

std::string shape_string(const Shape& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

int64_t shape_numel(const Shape& shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

// Zero-filled memory: host blocks come from the caching allocator (64-byte aligned, so SIMD loads never
// straddle a cache line at row starts), device blocks from the registered DeviceMemory.
struct Tensor::Storage {
    void* ptr = nullptr;
    size_t bytes = 0;
    Device device = Device::cpu;
    Storage(size_t n, Device d, bool clear) : bytes(n), device(d) {
        if (device == Device::cpu) {
            ptr = host_allocate(n);
            if (clear) std::memset(ptr, 0, n);
        } else {
            ptr = device_memory().allocate(n);
            if (clear) device_memory().zero(ptr, n);
        }
    }
    ~Storage() {
        if (device == Device::cpu)
            host_free(ptr, bytes);
        else
            device_memory().release(ptr, bytes);
    }
    Storage(const Storage&) = delete;
    Storage& operator=(const Storage&) = delete;
};

Tensor Tensor::allocate(const Shape& shape, DType dtype, Device device, bool clear) {
    for (int64_t d : shape)
        if (d < 0) throw std::invalid_argument("Tensor: negative dimension in " + shape_string(shape));
    Tensor t;
    t.shape_ = shape;
    t.dtype_ = dtype;
    t.device_ = device;
    t.storage_ = std::make_shared<Storage>(t.bytes(), device, clear);
    return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) { return allocate(shape, dtype, device, true); }

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) { return allocate(shape, dtype, device, false); }

int64_t Tensor::dim(int i) const {
    int r = rank();
    int j = i < 0 ? i + r : i;
    if (j < 0 || j >= r) throw std::out_of_range(fmt::format("Tensor::dim({}) of shape {}", i, shape_string(shape_)));
    return shape_[j];
}

void* Tensor::raw() const {
    if (!storage_) throw std::logic_error("use of an undefined tensor");
    return static_cast<char*>(storage_->ptr) + offset_bytes_;
}

void* Tensor::host_raw(const char* accessor) const {
    if (device_ != Device::cpu)
        throw std::logic_error(fmt::format("Tensor::{}() on a {} tensor: host access only", accessor, device_name(device_)));
    return raw();
}

float* Tensor::f32() {
    if (dtype_ != DType::f32) throw std::logic_error("Tensor::f32() on a tensor of dtype " + std::string(dtype_name(dtype_)));
    return static_cast<float*>(host_raw("f32"));
}
const float* Tensor::f32() const { return const_cast<Tensor*>(this)->f32(); }

int32_t* Tensor::i32() {
    if (dtype_ != DType::i32) throw std::logic_error("Tensor::i32() on a tensor of dtype " + std::string(dtype_name(dtype_)));
    return static_cast<int32_t*>(host_raw("i32"));
}
const int32_t* Tensor::i32() const { return const_cast<Tensor*>(this)->i32(); }

Tensor Tensor::reshaped(const Shape& shape) const {
    if (shape_numel(shape) != numel())
        throw std::logic_error(fmt::format("reshape {} -> {} changes the element count", shape_string(shape_), shape_string(shape)));
    Tensor t = *this;
    t.shape_ = shape;
    return t;
}

Tensor Tensor::rows(int64_t begin, int64_t end) const {
    if (rank() == 0 || begin < 0 || end < begin || end > shape_[0])
        throw std::out_of_range(fmt::format("rows({}, {}) of shape {}", begin, end, shape_string(shape_)));
    Tensor t = *this;
    int64_t row_elems = shape_[0] == 0 ? 0 : numel() / shape_[0];
    t.offset_bytes_ += static_cast<size_t>(begin * row_elems) * dtype_bytes(dtype_);
    t.shape_[0] = end - begin;
    return t;
}

void Tensor::zero() {
    if (device_ == Device::cpu)
        std::memset(raw(), 0, bytes());
    else
        device_memory().zero(raw(), bytes());
}

void Tensor::fill(float value) {
    float* p = f32();
    for (int64_t i = 0, n = numel(); i < n; ++i) p[i] = value;
}

void Tensor::copy_from(const Tensor& other) {
    if (other.dtype_ != dtype_ || other.numel() != numel())
        throw std::logic_error(fmt::format("copy_from: {} {} <- {} {}", dtype_name(dtype_), shape_string(shape_),
                                           dtype_name(other.dtype_), shape_string(other.shape_)));
    if (device_ == Device::cpu && other.device_ == Device::cpu)
        std::memmove(raw(), other.raw(), bytes());
    else
        device_memory().copy(raw(), device_, other.raw(), other.device_, bytes());
}

Tensor Tensor::clone() const {
    Tensor t = zeros(shape_, dtype_, device_);
    t.copy_from(*this);
    return t;
}

Tensor Tensor::to(Device device) const {
    if (device == device_) return *this;
    Tensor t = zeros(shape_, dtype_, device);
    t.copy_from(*this);
    return t;
}

}  // namespace nb

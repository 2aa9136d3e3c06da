#include "tensor.h"

#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>

#include <fmt/format.h>

namespace nb {

size_t dtype_bytes(DType dtype) {
    switch (dtype) {
        case DType::f32: return 4;
        case DType::i32: return 4;
    }
    return 0;
}

const char* dtype_name(DType dtype) { return dtype == DType::f32 ? "f32" : "i32"; }

std::string shape_string(const Shape& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

int64_t shape_numel(const Shape& shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

// 64-byte aligned host memory, so SIMD loads never straddle a cache line at row starts.
struct Tensor::Storage {
    void* ptr = nullptr;
    size_t bytes = 0;
    explicit Storage(size_t n) : bytes(n) {
        size_t rounded = (n + 63) / 64 * 64;
        ptr = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
        if (!ptr) throw std::bad_alloc();
        std::memset(ptr, 0, rounded == 0 ? 64 : rounded);
    }
    ~Storage() { std::free(ptr); }
    Storage(const Storage&) = delete;
    Storage& operator=(const Storage&) = delete;
};

Tensor Tensor::zeros(const Shape& shape, DType dtype) {
    for (int64_t d : shape)
        if (d < 0) throw std::invalid_argument("Tensor::zeros: negative dimension in " + shape_string(shape));
    Tensor t;
    t.shape_ = shape;
    t.dtype_ = dtype;
    t.storage_ = std::make_shared<Storage>(t.bytes());
    return t;
}

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

float* Tensor::f32() {
    if (dtype_ != DType::f32) throw std::logic_error("Tensor::f32() on a tensor of dtype " + std::string(dtype_name(dtype_)));
    return static_cast<float*>(raw());
}
const float* Tensor::f32() const { return const_cast<Tensor*>(this)->f32(); }

int32_t* Tensor::i32() {
    if (dtype_ != DType::i32) throw std::logic_error("Tensor::i32() on a tensor of dtype " + std::string(dtype_name(dtype_)));
    return static_cast<int32_t*>(raw());
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

void Tensor::zero() { std::memset(raw(), 0, bytes()); }

void Tensor::fill(float value) {
    float* p = f32();
    for (int64_t i = 0, n = numel(); i < n; ++i) p[i] = value;
}

void Tensor::copy_from(const Tensor& other) {
    if (other.dtype_ != dtype_ || other.numel() != numel())
        throw std::logic_error(fmt::format("copy_from: {} {} <- {} {}", dtype_name(dtype_), shape_string(shape_),
                                           dtype_name(other.dtype_), shape_string(other.shape_)));
    std::memmove(raw(), other.raw(), bytes());
}

Tensor Tensor::clone() const {
    Tensor t = zeros(shape_, dtype_);
    t.copy_from(*this);
    return t;
}

}  // namespace nb

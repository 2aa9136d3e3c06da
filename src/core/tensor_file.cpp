#include "src/core/tensor_file.h"

#include <bit>
#include <cstdint>
#include <cstring>
#include <limits>
#include <set>
#include <stdexcept>

#include <fmt/format.h>

#include "src/core/error.h"

namespace nb {

static_assert(std::endian::native == std::endian::little, "the tensor file is written in the host's byte order");

namespace {

constexpr std::string_view kMagic = "NBSTATE1";
constexpr int kMaxRank = 8;
constexpr uint32_t kMaxNameBytes = 4096;

template <typename T>
void put(std::string& out, T value) {
    out.append(reinterpret_cast<const char*>(&value), sizeof value);
}

// Reads the file front to back; every read checks that the bytes are there.
class Reader {
public:
    Reader(std::string_view bytes, const std::string& source) : bytes_(bytes), source_(source) {}

    template <typename T>
    T get(const char* what) {
        T value;
        std::memcpy(&value, take(sizeof value, what).data(), sizeof value);
        return value;
    }
    std::string_view take(uint64_t n, const char* what) {
        if (n > bytes_.size() - at_) fail(fmt::format("truncated: {} needs {} bytes at offset {}, {} are left", what, n, at_,
                                                      bytes_.size() - at_));
        const std::string_view s = bytes_.substr(at_, n);
        at_ += n;
        return s;
    }
    size_t left() const { return bytes_.size() - at_; }
    [[noreturn]] void fail(const std::string& what) const {
        throw RuntimeError(fmt::format("'{}': {}", source_, what));
    }

private:
    std::string_view bytes_;
    const std::string& source_;
    size_t at_ = 0;
};

DType dtype_of(uint8_t code, const Reader& r, const std::string& name) {
    switch (code) {
        case 0: return DType::f32;
        case 1: return DType::bf16;
        case 2: return DType::i32;
        default: r.fail(fmt::format("tensor '{}' has unknown dtype code {}", name, code));
    }
}

uint8_t code_of(DType dtype) {
    switch (dtype) {
        case DType::f32: return 0;
        case DType::bf16: return 1;
        case DType::i32: return 2;
    }
    throw std::logic_error("code_of: unknown dtype");
}

NamedTensor read_one(Reader& r, size_t index) {
    const auto name_bytes = r.get<uint32_t>("a name's length");
    if (name_bytes == 0 || name_bytes > kMaxNameBytes)
        r.fail(fmt::format("tensor {} has a name of {} bytes (1 to {} allowed)", index, name_bytes, kMaxNameBytes));
    NamedTensor t{std::string(r.take(name_bytes, "a name")), {}};
    const DType dtype = dtype_of(r.get<uint8_t>("a dtype"), r, t.name);
    const auto rank = r.get<uint8_t>("a rank");
    if (rank > kMaxRank) r.fail(fmt::format("tensor '{}' has rank {} (at most {})", t.name, rank, kMaxRank));
    Shape shape;
    uint64_t numel = 1;
    for (int d = 0; d < rank; ++d) {
        const auto dim = r.get<int64_t>("a dimension");
        if (dim < 0) r.fail(fmt::format("tensor '{}' has a negative dimension {}", t.name, dim));
        // The data follows in the file, so numel stays below the bytes left: the product cannot overflow.
        if (dim > 0 && numel > r.left() / static_cast<uint64_t>(dim))
            r.fail(fmt::format("tensor '{}' is larger than the file", t.name));
        numel *= static_cast<uint64_t>(dim);
        shape.push_back(dim);
    }
    if (numel > r.left() / dtype_bytes(dtype)) r.fail(fmt::format("tensor '{}' is larger than the file", t.name));
    const auto data_bytes = r.get<uint64_t>("a data size");
    if (data_bytes != numel * dtype_bytes(dtype))
        r.fail(fmt::format("tensor '{}' {} {} says {} data bytes, its shape needs {}", t.name, dtype_name(dtype),
                           shape_string(shape), data_bytes, numel * dtype_bytes(dtype)));
    const std::string_view data = r.take(data_bytes, "a tensor's data");
    t.tensor = Tensor::empty(shape, dtype, Device::cpu);
    if (data_bytes > 0) std::memcpy(t.tensor.data(), data.data(), data_bytes);
    return t;
}

}  // namespace

std::string encode_named_tensors(const std::vector<std::pair<std::string, const Tensor*>>& tensors) {
    std::set<std::string_view> names;
    std::string out(kMagic);
    put<uint64_t>(out, tensors.size());
    for (const auto& [name, tensor] : tensors) {
        if (name.empty() || name.size() > kMaxNameBytes || !names.insert(name).second)
            throw std::invalid_argument(fmt::format("encode_named_tensors: bad or duplicate name '{}'", name));
        if (tensor == nullptr || !tensor->defined() || tensor->device() != Device::cpu || tensor->rank() > kMaxRank)
            throw std::invalid_argument(fmt::format("encode_named_tensors: tensor '{}' is undefined, not on the "
                                                    "host or of rank > {}", name, kMaxRank));
        put<uint32_t>(out, static_cast<uint32_t>(name.size()));
        out += name;
        put<uint8_t>(out, code_of(tensor->dtype()));
        put<uint8_t>(out, static_cast<uint8_t>(tensor->rank()));
        for (int64_t d : tensor->shape()) put<int64_t>(out, d);
        put<uint64_t>(out, tensor->bytes());
        if (tensor->bytes() > 0) out.append(static_cast<const char*>(tensor->data()), tensor->bytes());
    }
    return out;
}

std::vector<NamedTensor> decode_named_tensors(std::string_view bytes, const std::string& source) {
    Reader r(bytes, source);
    if (r.left() < kMagic.size() || bytes.substr(0, kMagic.size()) != kMagic)
        r.fail("not a nobubble tensor file (no NBSTATE1 header)");
    r.take(kMagic.size(), "the header");
    const auto count = r.get<uint64_t>("the tensor count");
    // Each tensor takes at least 15 bytes: a bound on the count that keeps a damaged one from allocating.
    if (count > r.left() / 15) r.fail(fmt::format("says {} tensors, more than {} bytes can hold", count, r.left()));
    std::vector<NamedTensor> out;
    std::set<std::string> names;
    for (size_t i = 0; i < count; ++i) {
        out.push_back(read_one(r, i));
        if (!names.insert(out.back().name).second) r.fail(fmt::format("tensor '{}' appears twice", out.back().name));
    }
    if (r.left() != 0) r.fail(fmt::format("{} bytes after the last of its {} tensors", r.left(), count));
    return out;
}

}  // namespace nb

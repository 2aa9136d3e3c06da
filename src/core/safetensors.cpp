#include "src/core/safetensors.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <stdexcept>

#include <fmt/format.h>

#include "src/core/error.h"
#include "src/core/json_reader.h"

namespace nb {

static_assert(std::endian::native == std::endian::little, "safetensors is little-endian, as is the host");

namespace {

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // the reference reader's limit
constexpr std::string_view kMetadataKey = "__metadata__";

struct DTypeName {
    SafetensorsDType dtype;
    const char* name;
    size_t bytes;
};
constexpr DTypeName kDTypes[] = {{SafetensorsDType::f32, "F32", 4},
                                 {SafetensorsDType::bf16, "BF16", 2},
                                 {SafetensorsDType::f16, "F16", 2},
                                 {SafetensorsDType::i32, "I32", 4}};

const DTypeName& dtype_entry(SafetensorsDType dtype) {
    for (const DTypeName& d : kDTypes)
        if (d.dtype == dtype) return d;
    throw std::logic_error("safetensors: unknown dtype");
}

SafetensorsDType stored_dtype(DType dtype) {
    switch (dtype) {
        case DType::f32: return SafetensorsDType::f32;
        case DType::bf16: return SafetensorsDType::bf16;
        case DType::i32: return SafetensorsDType::i32;
    }
    throw std::logic_error("safetensors: unknown tensor dtype");
}

// Checks the header's parts against the data section, naming the file and the tensor.
class HeaderReader {
public:
    HeaderReader(const std::string& source, uint64_t data_bytes) : source_(source), data_bytes_(data_bytes) {}

    [[noreturn]] void fail(const std::string& what) const {
        throw RuntimeError(fmt::format("'{}': {}", source_, what));
    }
    [[noreturn]] void fail(const std::string& name, const std::string& what) const {
        fail(fmt::format("tensor '{}' {}", printable(name), what));
    }

    std::map<std::string, std::string> metadata(const Json& value) const {
        if (!value.is_object()) fail(fmt::format("'__metadata__' is {}, not an object of strings", json_kind(value)));
        std::map<std::string, std::string> out;
        for (const auto& [key, text] : value.items()) {
            if (!text.is_string())
                fail(fmt::format("'__metadata__' field '{}' is {}, not a string", printable(key), json_kind(text)));
            out.emplace(key, text.get<std::string>());
        }
        return out;
    }

    SafetensorsEntry entry(const std::string& name, const Json& info) const {
        if (!info.is_object()) fail(name, fmt::format("is {}, not an object", json_kind(info)));
        SafetensorsEntry e{name, dtype(name, info), {}, 0, 0, {}};
        const uint64_t numel = shape(name, info, e.shape);
        offsets(name, info, e);
        const size_t dtype_bytes = safetensors_dtype_bytes(e.dtype);
        if (numel > data_bytes_ / dtype_bytes || e.end - e.begin != numel * dtype_bytes)
            fail(name, fmt::format("{} {} needs {} bytes, its data_offsets [{}, {}] hold {}",
                                   safetensors_dtype_name(e.dtype), shape_string(e.shape),
                                   numel > data_bytes_ ? fmt::format("more than {}", data_bytes_)
                                                       : fmt::format("{}", numel * dtype_bytes),
                                   e.begin, e.end, e.end - e.begin));
        return e;
    }

private:
    const Json& field(const std::string& name, const Json& info, const char* key) const {
        const auto it = info.find(key);
        if (it == info.end()) fail(name, fmt::format("has no '{}'", key));
        return *it;
    }

    SafetensorsDType dtype(const std::string& name, const Json& info) const {
        const Json& value = field(name, info, "dtype");
        if (value.is_string())
            for (const DTypeName& d : kDTypes)
                if (value.get_ref<const std::string&>() == d.name) return d.dtype;
        const std::string shown =
            value.is_string() ? fmt::format("'{}'", printable(value.get<std::string>())) : json_kind(value);
        fail(name, fmt::format("has dtype {}, which nobubble does not read (F32, BF16, F16, I32)", shown));
    }

    // The element count; the shape into `shape`. Bounded by the data size as it goes, so it cannot overflow.
    uint64_t shape(const std::string& name, const Json& info, Shape& shape) const {
        const Json& dims = field(name, info, "shape");
        if (!dims.is_array()) fail(name, fmt::format("has a shape that is {}, not an array", json_kind(dims)));
        uint64_t numel = 1;
        bool bounded = true;  // numel <= data_bytes_ + 1
        for (const Json& dim : dims) {
            if (!dim.is_number_unsigned() || dim.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
                fail(name, fmt::format("has a dimension {} that is not a non-negative integer", printable(dim.dump())));
            const uint64_t d = dim.get<uint64_t>();
            shape.push_back(static_cast<int64_t>(d));
            if (d == 0) numel = 0, bounded = true;
            else if (bounded && numel > data_bytes_ / d) numel = data_bytes_ + 1, bounded = false;
            else if (bounded) numel *= d;
        }
        return numel;
    }

    void offsets(const std::string& name, const Json& info, SafetensorsEntry& e) const {
        const Json& range = field(name, info, "data_offsets");
        if (!range.is_array() || range.size() != 2 || !range[0].is_number_unsigned() || !range[1].is_number_unsigned())
            fail(name, fmt::format("has data_offsets {}, not [begin, end]", printable(range.dump())));
        e.begin = range[0].get<uint64_t>();
        e.end = range[1].get<uint64_t>();
        if (e.begin > e.end)
            fail(name, fmt::format("has data_offsets [{}, {}] that end before they begin", e.begin, e.end));
        if (e.end > data_bytes_)
            fail(name, fmt::format("has data_offsets [{}, {}] past the end of the data ({} bytes)", e.begin, e.end,
                                   data_bytes_));
    }

    const std::string& source_;
    uint64_t data_bytes_;
};

// The tensors in data order, covering the data exactly: no overlap, no gap, nothing after the last.
void check_coverage(std::vector<SafetensorsEntry>& tensors, uint64_t data_bytes, const HeaderReader& r) {
    std::stable_sort(tensors.begin(), tensors.end(), [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
        return std::pair(a.begin, a.end) < std::pair(b.begin, b.end);
    });
    uint64_t covered = 0;
    for (size_t i = 0; i < tensors.size(); ++i) {
        const SafetensorsEntry& t = tensors[i];
        if (t.begin < covered)
            r.fail(t.name, fmt::format("(bytes {} to {}) overlaps tensor '{}' (bytes {} to {})", t.begin, t.end,
                                       printable(tensors[i - 1].name), tensors[i - 1].begin, tensors[i - 1].end));
        if (t.begin > covered)
            r.fail(t.name, fmt::format("begins at byte {}: bytes {} to {} of the data belong to no tensor", t.begin,
                                       covered, t.begin));
        covered = t.end;
    }
    if (covered != data_bytes)
        r.fail(fmt::format("bytes {} to {} of the data belong to no tensor", covered, data_bytes));
}

uint64_t header_length(std::string_view bytes, const std::string& source) {
    const auto fail = [&](const std::string& what) { throw RuntimeError(fmt::format("'{}': {}", source, what)); };
    if (bytes.size() < 8)
        fail(fmt::format("not a safetensors file: {} bytes, fewer than the 8 of the header's length", bytes.size()));
    uint64_t n;
    std::memcpy(&n, bytes.data(), 8);
    if (n > bytes.size() - 8)
        fail(fmt::format("not a safetensors file: a header of {} bytes is larger than the file ({} bytes)", n,
                         bytes.size()));
    if (n > kMaxHeaderBytes)
        fail(fmt::format("a safetensors header of {} bytes is over the {} allowed", n, kMaxHeaderBytes));
    if (n == 0 || bytes[8] != '{') fail("not a safetensors file: its header does not begin with '{'");
    return n;
}

void widen(const SafetensorsEntry& e, float* out) {
    const size_t n = e.data.size() / 2;
    for (size_t i = 0; i < n; ++i) {
        uint16_t bits;
        std::memcpy(&bits, e.data.data() + 2 * i, 2);
        out[i] = e.dtype == SafetensorsDType::bf16 ? bf16_to_f32(bits) : f16_to_f32(bits);
    }
}

}  // namespace

const char* safetensors_dtype_name(SafetensorsDType dtype) { return dtype_entry(dtype).name; }
size_t safetensors_dtype_bytes(SafetensorsDType dtype) { return dtype_entry(dtype).bytes; }

float bf16_to_f32(uint16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

float f16_to_f32(uint16_t bits) {
    const uint32_t sign = static_cast<uint32_t>(bits >> 15) << 31;
    const uint32_t exponent = (bits >> 10) & 0x1f;
    const uint32_t mantissa = bits & 0x3ff;
    if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24, exact in float32
        const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
        return sign ? -magnitude : magnitude;
    }
    if (exponent == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));  // inf, NaN
    return std::bit_cast<float>(sign | ((exponent - 15 + 127) << 23) | (mantissa << 13));
}

const SafetensorsEntry* SafetensorsView::find(std::string_view name) const {
    for (const SafetensorsEntry& e : tensors)
        if (e.name == name) return &e;
    return nullptr;
}

const SafetensorsEntry& SafetensorsView::at(std::string_view name) const {
    if (const SafetensorsEntry* e = find(name)) return *e;
    throw RuntimeError(fmt::format("'{}': no tensor '{}'", source, printable(name)));
}

Tensor SafetensorsView::as_stored(const SafetensorsEntry& e) const {
    DType dtype = DType::f32;
    switch (e.dtype) {
        case SafetensorsDType::f32: dtype = DType::f32; break;
        case SafetensorsDType::bf16: dtype = DType::bf16; break;
        case SafetensorsDType::i32: dtype = DType::i32; break;
        case SafetensorsDType::f16:
            throw RuntimeError(fmt::format("'{}': tensor '{}' is F16, which nobubble holds only as float32", source,
                                           printable(e.name)));
    }
    Tensor t = Tensor::empty(e.shape, dtype, Device::cpu);
    if (!e.data.empty()) std::memcpy(t.data(), e.data.data(), e.data.size());
    return t;
}

Tensor SafetensorsView::as_f32(const SafetensorsEntry& e) const {
    if (e.dtype == SafetensorsDType::f32 || e.dtype == SafetensorsDType::i32) {
        if (e.dtype == SafetensorsDType::i32)
            throw RuntimeError(fmt::format("'{}': tensor '{}' is I32, not a floating-point tensor", source,
                                           printable(e.name)));
        return as_stored(e);
    }
    Tensor t = Tensor::empty(e.shape, DType::f32, Device::cpu);
    widen(e, t.f32());
    return t;
}

SafetensorsView parse_safetensors(std::string_view bytes, const std::string& source) {
    const uint64_t n = header_length(bytes, source);
    const Json header = read_json(bytes.substr(8, n), source);
    if (!header.is_object())
        throw RuntimeError(fmt::format("'{}': its safetensors header is not a JSON object", source));
    const std::string_view data = bytes.substr(8 + n);
    const HeaderReader reader(source, data.size());
    SafetensorsView view{source, {}, {}};
    for (const auto& [name, info] : header.items()) {
        if (name == kMetadataKey) {
            view.metadata = reader.metadata(info);
            continue;
        }
        SafetensorsEntry& e = view.tensors.emplace_back(reader.entry(name, info));
        e.data = data.substr(e.begin, e.end - e.begin);
    }
    check_coverage(view.tensors, data.size(), reader);
    return view;
}

std::vector<NamedTensor> SafetensorsView::all_as_stored() const {
    std::vector<NamedTensor> out;
    out.reserve(tensors.size());
    for (const SafetensorsEntry& e : tensors) out.push_back({e.name, as_stored(e)});
    return out;
}

std::vector<NamedTensor> decode_safetensors(std::string_view bytes, const std::string& source) {
    return parse_safetensors(bytes, source).all_as_stored();
}

SafetensorsPieces::SafetensorsPieces(const std::vector<std::pair<std::string, const Tensor*>>& tensors,
                                     const std::map<std::string, std::string>& metadata) {
    std::set<std::string_view> names;
    for (const auto& [name, tensor] : tensors) {  // every check before the first copy from a device
        if (name.empty() || name == kMetadataKey || !names.insert(name).second)
            throw std::invalid_argument(fmt::format("encode_safetensors: bad or duplicate name '{}'", name));
        if (tensor == nullptr || !tensor->defined())
            throw std::invalid_argument(fmt::format("encode_safetensors: tensor '{}' is undefined", name));
    }
    nlohmann::ordered_json header = nlohmann::ordered_json::object();
    if (!metadata.empty()) header[kMetadataKey] = metadata;
    uint64_t offset = 0;
    for (const auto& [name, tensor] : tensors) {
        const Tensor* host = tensor;
        if (tensor->device() != Device::cpu) host = &host_copies_.emplace_back(tensor->to(Device::cpu));
        header[name] = {{"dtype", safetensors_dtype_name(stored_dtype(host->dtype()))},
                        {"shape", host->shape()},
                        {"data_offsets", {offset, offset + host->bytes()}}};
        offset += host->bytes();
    }
    try {
        header_ = header.dump();
    } catch (const nlohmann::ordered_json::exception& e) {  // a name or metadata that is not UTF-8
        throw std::invalid_argument(std::string("encode_safetensors: ") + e.what());
    }
    header_.append((8 - header_.size() % 8) % 8, ' ');
    const uint64_t header_bytes = header_.size();
    header_.insert(0, reinterpret_cast<const char*>(&header_bytes), 8);
    // The views last, once neither the header nor a host copy moves any more.
    pieces_.push_back(header_);
    size_t copy = 0;
    for (size_t i = 0; i < tensors.size(); ++i) {
        const Tensor& host = tensors[i].second->device() == Device::cpu ? *tensors[i].second : host_copies_[copy++];
        pieces_.emplace_back(static_cast<const char*>(host.data()), host.bytes());
    }
    for (const std::string_view piece : pieces_) bytes_ += piece.size();
}

std::string SafetensorsPieces::joined() const {
    std::string out;
    out.reserve(bytes_);
    for (const std::string_view piece : pieces_) out += piece;
    return out;
}

std::string encode_safetensors(const std::vector<std::pair<std::string, const Tensor*>>& tensors,
                               const std::map<std::string, std::string>& metadata) {
    return SafetensorsPieces(tensors, metadata).joined();
}

}  // namespace nb

// safetensors (https://github.com/huggingface/safetensors): the tensor file that Hugging Face, PyTorch and most
// tools read, used for a checkpoint's stage files and for export to and import from Hugging Face.
//
// Layout: u64 N (little-endian), N bytes of a JSON object (padded with spaces so that the data starts 8-byte
// aligned), then the data. The object maps each tensor's name to {"dtype": "F32", "shape": [..], "data_offsets":
// [begin, end]} (offsets into the data), and may hold "__metadata__": a map of strings to strings.
//
// The header is untrusted: parse_safetensors checks all of it before any tensor is used, as the reference reader
// does (its rules, so that what we accept it accepts): a header within the file and at most 100 MB, one JSON
// object, known dtypes, non-negative integer dims, offsets within the data, each tensor's bytes = its shape times
// its dtype's size, and the tensors covering the data exactly (no overlap, no gap, nothing after the last). Each
// failure is one nb::RuntimeError "'SOURCE': ..." naming the file and, where there is one, the tensor.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "src/core/named_tensor.h"
#include "src/core/tensor.h"

namespace nb {

// The dtypes we read (and, but for F16, write): safetensors' names F32, BF16, F16, I32.
enum class SafetensorsDType : uint8_t { f32, bf16, f16, i32 };
const char* safetensors_dtype_name(SafetensorsDType dtype);
size_t safetensors_dtype_bytes(SafetensorsDType dtype);

struct SafetensorsEntry {
    std::string name;
    SafetensorsDType dtype;
    Shape shape;
    uint64_t begin = 0, end = 0;  // data_offsets: bytes into the data section
    std::string_view data;        // those bytes, within the file's bytes
};

// A parsed file: views into its bytes, which must outlive it.
struct SafetensorsView {
    std::string source;
    std::vector<SafetensorsEntry> tensors;  // in data order (by begin offset)
    std::map<std::string, std::string> metadata;  // "__metadata__", empty if absent

    const SafetensorsEntry* find(std::string_view name) const;  // nullptr if absent
    // The tensor, or nb::RuntimeError "'SOURCE': no tensor 'NAME'".
    const SafetensorsEntry& at(std::string_view name) const;
    // Host tensors, copied out. As stored: F32, BF16 and I32 bit for bit (nb::RuntimeError for F16, which has no
    // tensor type here). As float32: F32 as is, BF16 and F16 widened exactly (nb::RuntimeError for I32).
    Tensor as_stored(const SafetensorsEntry& entry) const;
    Tensor as_f32(const SafetensorsEntry& entry) const;
    std::vector<NamedTensor> all_as_stored() const;  // every tensor, in data order
};

// `bytes` (a file's contents, held or mapped) checked and parsed, or nb::RuntimeError naming `source`.
SafetensorsView parse_safetensors(std::string_view bytes, const std::string& source);

// Every tensor as stored, in data order (parse_safetensors(...).all_as_stored()).
std::vector<NamedTensor> decode_safetensors(std::string_view bytes, const std::string& source);

// A safetensors file as the pieces it is made of, in order, without copying the tensors' data: the header, then
// views of the tensors' host memory (a device tensor is copied to the host first and held here), the data in the
// order given. A checkpoint writes and hashes these where they lie. The tensors must outlive this object and stay
// unchanged while it is used. std::invalid_argument for an undefined tensor, an empty or duplicate name, or the
// name "__metadata__".
class SafetensorsPieces {
public:
    SafetensorsPieces(const std::vector<std::pair<std::string, const Tensor*>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});
    SafetensorsPieces(const SafetensorsPieces&) = delete;  // the pieces point into the header
    SafetensorsPieces& operator=(const SafetensorsPieces&) = delete;

    const std::vector<std::string_view>& pieces() const { return pieces_; }
    size_t bytes() const { return bytes_; }
    std::string joined() const;  // the file's bytes in one string

private:
    std::string header_;
    std::vector<Tensor> host_copies_;  // of the device tensors
    std::vector<std::string_view> pieces_;
    size_t bytes_ = 0;
};

// The file's bytes in one string (SafetensorsPieces(tensors, metadata).joined()).
std::string encode_safetensors(const std::vector<std::pair<std::string, const Tensor*>>& tensors,
                               const std::map<std::string, std::string>& metadata = {});

// One IEEE half or bfloat16 value (its bits) as the float32 it is exactly.
float f16_to_f32(uint16_t bits);
float bf16_to_f32(uint16_t bits);

}  // namespace nb

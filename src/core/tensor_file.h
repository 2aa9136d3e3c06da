// The named-tensor file of a checkpoint (docs/DESIGN.md section 8: `stage_<s>.bin`): tensors in the order given, each
// with its canonical name, dtype, shape and little-endian bytes, so a reader can match state by name (and so
// load it into another stage cut) and check every piece before it uses any.
//
// Layout, all integers little-endian:
//   "NBSTATE1"                      8 bytes, the magic and format version
//   u64 count                       tensors that follow
//   per tensor:  u32 name bytes, the name (UTF-8)
//                u8 dtype (0 f32, 1 bf16, 2 i32), u8 rank (<= 8), i64 dims[rank]
//                u64 data bytes (= numel * dtype bytes), the data
// Nothing may follow the last tensor.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "src/core/named_tensor.h"
#include "src/core/tensor.h"

namespace nb {

// The file as the pieces it is made of, its bytes in order, without copying the tensors' data: small headers of
// its own (the magic and count; each tensor's name, dtype and shape) and views of the tensors' host memory (a
// device tensor is copied to the host first and held here). A checkpoint writes and hashes these pieces where
// they lie, so saving a stage needs no second copy of its state in memory. The tensors must outlive this object
// and stay unchanged while it is used. std::invalid_argument for an undefined tensor, an empty or duplicate name.
class TensorFilePieces {
public:
    explicit TensorFilePieces(const std::vector<std::pair<std::string, const Tensor*>>& tensors);
    TensorFilePieces(const TensorFilePieces&) = delete;  // the pieces point into the headers
    TensorFilePieces& operator=(const TensorFilePieces&) = delete;

    const std::vector<std::string_view>& pieces() const { return pieces_; }
    size_t bytes() const { return bytes_; }
    std::string joined() const;  // the file's bytes in one string

private:
    std::vector<std::string> headers_;
    std::vector<Tensor> host_copies_;  // of the device tensors
    std::vector<std::string_view> pieces_;
    size_t bytes_ = 0;
};

// The file's bytes in one string (TensorFilePieces(tensors).joined()).
std::string encode_named_tensors(const std::vector<std::pair<std::string, const Tensor*>>& tensors);

// The tensors of a file's bytes, in file order. nb::RuntimeError "'SOURCE': ..." naming what is wrong (the magic,
// a truncation and where, an unknown dtype, a rank or size that does not fit, a duplicate name, bytes after the
// last tensor); it never reads outside `bytes`, whatever they hold.
std::vector<NamedTensor> decode_named_tensors(std::string_view bytes, const std::string& source);

}  // namespace nb

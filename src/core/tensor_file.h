// The named-tensor file of checkpoint format 1 (`stage_<s>.bin`, before the stage files became safetensors:
// src/core/safetensors.h, docs/formats.md): read so that older checkpoints still load; written only by tests (a
// format-1 checkpoint to load). Tensors in the order given, each with its canonical name, dtype, shape and
// little-endian bytes.
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

// The file's bytes (host tensors). std::invalid_argument for an undefined or device tensor, an empty or duplicate
// name.
std::string encode_named_tensors(const std::vector<std::pair<std::string, const Tensor*>>& tensors);

// The tensors of a file's bytes, in file order. nb::RuntimeError "'SOURCE': ..." naming what is wrong (the magic,
// a truncation and where, an unknown dtype, a rank or size that does not fit, a duplicate name, bytes after the
// last tensor); it never reads outside `bytes`, whatever they hold.
std::vector<NamedTensor> decode_named_tensors(std::string_view bytes, const std::string& source);

}  // namespace nb

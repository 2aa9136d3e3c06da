#include "model/weights_hash.h"

#include <bit>

#include "src/core/sha256.h"

namespace nb {

static_assert(std::endian::native == std::endian::little, "weights are hashed as little-endian fp32");

std::string weights_sha256(const TensorSet& weights) {
    Sha256 sha;
    for (const auto& t : weights.tensors) sha.update(t.f32(), t.bytes());
    return Sha256::hex(sha.digest());
}

}  // namespace nb

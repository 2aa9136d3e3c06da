// The fingerprint that compares runs: SHA-256 over all parameters in canonical (layout) order, each as
// little-endian fp32. Printed as `final weights sha256 <hex>` at the end of training.
#pragma once

#include <string>

#include "model/params.h"

namespace nb {

std::string weights_sha256(const TensorSet& weights);

}  // namespace nb

// Byte counts as people read them in one-line messages: "0 B", "512 B", "52.4 MB", "1.26 TB" (decimal units,
// three significant digits, as `df -H` and disk vendors write them).
#pragma once

#include <cstdint>
#include <string>

namespace nb {

std::string format_bytes(int64_t bytes);

}  // namespace nb

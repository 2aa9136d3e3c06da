#include "src/core/byte_size.h"

#include <cmath>

#include <fmt/format.h>

namespace nb {

std::string format_bytes(int64_t bytes) {
    static const char* const kUnits[] = {"B", "kB", "MB", "GB", "TB", "PB", "EB"};
    if (bytes < 1000 && bytes > -1000) return fmt::format("{} B", bytes);
    double value = static_cast<double>(bytes);
    int unit = 0;
    // Rounding to three digits may carry into the next unit (999.7 kB prints as 1.00 MB, not 1000 kB).
    while (std::fabs(value) >= 999.5 && unit < 6) value /= 1000.0, ++unit;
    const double magnitude = std::fabs(value);
    const int decimals = magnitude >= 99.95 ? 0 : magnitude >= 9.995 ? 1 : 2;
    return fmt::format("{:.{}f} {}", value, decimals, kUnits[unit]);
}

}  // namespace nb

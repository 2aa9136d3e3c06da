#include "src/core/host_memory.h"

#include <algorithm>
#include <charconv>
#include <fstream>
#include <sstream>
#include <string>

namespace nb {

std::optional<int64_t> parse_mem_available_bytes(std::string_view meminfo) {
    constexpr std::string_view key = "MemAvailable:";
    const size_t at = meminfo.find(key);
    if (at == std::string_view::npos || (at > 0 && meminfo[at - 1] != '\n')) return std::nullopt;
    std::string_view rest = meminfo.substr(at + key.size());
    rest.remove_prefix(std::min(rest.find_first_not_of(' '), rest.size()));
    int64_t kib = 0;
    const auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), kib);
    if (ec != std::errc() || kib < 0 || !rest.substr(static_cast<size_t>(end - rest.data())).starts_with(" kB"))
        return std::nullopt;
    return kib * 1024;
}

std::optional<int64_t> host_memory_available_bytes() {
    std::ifstream file("/proc/meminfo");
    if (!file) return std::nullopt;
    std::ostringstream text;
    text << file.rdbuf();
    return parse_mem_available_bytes(text.str());
}

}  // namespace nb

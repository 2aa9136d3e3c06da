#include "src/core/name_table.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace nb {

UsageError unknown_name_error(std::string_view flag, std::string_view name, std::span<const std::string_view> valid) {
    return UsageError(fmt::format("unknown {} '{}' (valid: {})", flag, name, comma_list(valid)));
}

std::string comma_list(std::span<const std::string_view> names) { return fmt::format("{}", fmt::join(names, ", ")); }

std::string or_list(std::span<const std::string> choices) {
    if (choices.size() < 2) return fmt::format("{}", fmt::join(choices, ""));
    return fmt::format("{} or {}", fmt::join(choices.begin(), choices.end() - 1, ", "), choices.back());
}

}  // namespace nb

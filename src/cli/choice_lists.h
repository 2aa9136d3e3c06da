// `nobubble --list KIND`: the names each command-line choice accepts, one per line, read from the tables that
// parse them (src/core/name_table.h, the optimizer registry, the model presets), so that scripts need not
// hard-code them.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace nb::cli {

// The kinds --list knows: "optimizers", "schedules", "delay-fixes", ...
std::vector<std::string_view> choice_kinds();
// The names of `kind`, in the order --help lists them; UsageError "unknown --list 'x' (valid: ...)" otherwise.
std::vector<std::string> choice_names(std::string_view kind);

}  // namespace nb::cli

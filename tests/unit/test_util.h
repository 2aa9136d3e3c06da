// Small helpers shared by the unit tests.
#pragma once

#include <functional>
#include <string>

#include "src/core/error.h"

namespace nb::test {

// The message of the nb::UsageError that `f` throws, or "" if it throws none.
inline std::string usage_error(const std::function<void()>& f) {
    try {
        f();
    } catch (const nb::UsageError& e) {
        return e.what();
    }
    return "";
}

inline bool contains(const std::string& haystack, const std::string& needle) {
    return haystack.find(needle) != std::string::npos;
}

}  // namespace nb::test

// Small helpers shared by the unit tests.
#pragma once

#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <functional>
#include <string>

#include "src/core/error.h"

namespace nb::test {

// A fresh folder under /tmp for one test, removed with everything in it when the test ends.
struct TempDir {
    std::string path;
    TempDir() {
        char tmpl[] = "/tmp/nb_test_XXXXXX";
        REQUIRE(::mkdtemp(tmpl) != nullptr);
        path = tmpl;
    }
    ~TempDir() { std::filesystem::remove_all(path); }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    std::string file(const std::string& name) const { return path + "/" + name; }
};

// The message of the `E` that `f` throws, or "" if it throws none (another exception escapes).
template <typename E>
std::string message_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const E& e) {
        return e.what();
    }
    return "";
}
inline std::string usage_error(const std::function<void()>& f) { return message_of<nb::UsageError>(f); }
inline std::string runtime_error(const std::function<void()>& f) { return message_of<nb::RuntimeError>(f); }

inline bool contains(const std::string& haystack, const std::string& needle) {
    return haystack.find(needle) != std::string::npos;
}

}  // namespace nb::test

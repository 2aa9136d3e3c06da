// Small helpers shared by the unit tests.
#pragma once

#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

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

// Every contiguous cut of L blocks into P non-empty stages, as block boundaries 0 = b0 < b1 < ... < bP = L, in
// lexicographic order (so the first optimum a search finds gives earlier stages the fewest blocks).
inline void for_each_cut(int64_t L, int P, const std::function<void(const std::vector<int64_t>&)>& visit) {
    std::vector<int64_t> bounds(static_cast<size_t>(P) + 1, 0);
    bounds[static_cast<size_t>(P)] = L;
    std::function<void(int, int64_t)> rec = [&](int s, int64_t first) {
        if (s == P - 1) {
            if (first < L) visit(bounds);
            return;
        }
        for (int64_t end = first + 1; end <= L - (P - 1 - s); ++end) {
            bounds[static_cast<size_t>(s) + 1] = end;
            rec(s + 1, end);
        }
    };
    rec(0, 0);
}
inline std::string runtime_error(const std::function<void()>& f) { return message_of<nb::RuntimeError>(f); }

inline bool contains(const std::string& haystack, const std::string& needle) {
    return haystack.find(needle) != std::string::npos;
}

}  // namespace nb::test

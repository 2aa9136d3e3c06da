// Errors that reach the user as one line `nobubble: error: ...`.
//
// UsageError: the command line, config or preset asks for something impossible (exit code 2).
// RuntimeError: a file, the data or the machine fails us during the run (exit code 1).
#pragma once

#include <new>
#include <stdexcept>
#include <string>

namespace nb {

struct UsageError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

struct RuntimeError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// An error that another MPI rank reports: every rank found one, one rank prints it, and this one only exits
// with `exit_code`, printing nothing (so that a job prints one line, not one per rank).
struct ReportedElsewhere : std::runtime_error {
    ReportedElsewhere(int code, const std::string& what) : std::runtime_error(what), exit_code(code) {}
    int exit_code;
};

// The text of an error for its line: what() for ours; an exhausted allocation ("std::bad_alloc") says what it is.
inline std::string error_text(const std::exception& e) {
    if (dynamic_cast<const std::bad_alloc*>(&e)) return std::string("out of memory (") + e.what() + ")";
    return e.what();
}

constexpr int kExitUsage = 2;
constexpr int kExitRuntime = 1;

}  // namespace nb

// The check that an id read from an i32 tensor (a token, a target) indexes one of the vocabulary's rows: the CPU
// kernels read table rows by it, and one past the table would be silent garbage.
#pragma once

#include <cstdint>
#include <stdexcept>

#include <fmt/format.h>

namespace nb {

// ids[n], or std::out_of_range "<op>: <what> <id> at <where> <n> is outside the vocabulary [0, <vocab>)", e.g.
// what "token", where "position".
inline int64_t checked_vocab_id(const char* op, const char* what, const char* where, const int32_t* ids, int64_t n,
                                int64_t vocab) {
    const int64_t id = ids[n];
    if (id < 0 || id >= vocab)
        throw std::out_of_range(
            fmt::format("{}: {} {} at {} {} is outside the vocabulary [0, {})", op, what, id, where, n, vocab));
    return id;
}

}  // namespace nb

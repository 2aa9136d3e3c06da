#include "src/cli/synthetic_corpus.h"

#include <unistd.h>

#include <cstdio>
#include <iterator>
#include <string>

#include <fmt/format.h>

#include "src/core/error.h"
#include "src/core/rng.h"

namespace nb::cli {

SyntheticCorpus::SyntheticCorpus(uint64_t seed) {
    char tmpl[] = "/tmp/nobubble_bench_corpus_XXXXXX";
    const int fd = ::mkstemp(tmpl);
    if (fd < 0) throw RuntimeError("bench: cannot create a temporary corpus in /tmp");
    path_ = tmpl;
    static const char* const words[] = {"the", "pipeline", "bubble", "stage", "weights", "gradient", "of",
                                        "a", "step", "model", "and", "microbatch", "stale", "one", "two",
                                        "async", "flush", "loss", "token", "layer", "is", "to", "in", "it"};
    Rng rng(seed);
    std::string text;
    while (text.size() < (1u << 20)) {
        const uint64_t n = 4 + rng.below(12);
        for (uint64_t w = 0; w < n; ++w) {
            text += words[rng.below(std::size(words))];
            text += w + 1 < n ? ' ' : '.';
        }
        text += rng.below(4) == 0 ? '\n' : ' ';
    }
    const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
    ::close(fd);
    if (!ok) throw RuntimeError(fmt::format("bench: cannot write the temporary corpus {}", path_));
}

}  // namespace nb::cli

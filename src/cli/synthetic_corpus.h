// SyntheticCorpus: the benches' default training data, a corpus of seeded pseudo-words in a temporary file.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace nb::cli {

// A corpus of seeded pseudo-words (bytes are tokens), the same on every rank; each rank writes its own file.
class SyntheticCorpus {
public:
    explicit SyntheticCorpus(uint64_t seed);
    ~SyntheticCorpus() { std::remove(path_.c_str()); }
    SyntheticCorpus(const SyntheticCorpus&) = delete;
    SyntheticCorpus& operator=(const SyntheticCorpus&) = delete;
    const std::string& path() const { return path_; }

private:
    std::string path_;
};

}  // namespace nb::cli

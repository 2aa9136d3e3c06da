// Token sources: a text file (one token per byte, vocab 256) or llm.c token shards.
//
// llm.c shard format (little-endian): a 1024-byte header of 256 int32 where header[0] = 20240520 (magic),
// header[1] = 1 (version: uint16 tokens), header[2] = number of tokens; then that many uint16 tokens.
//
// Text files are read into memory (they are small: a few MB); shards are memory-mapped read-only, so a
// multi-GB shard costs address space, not RAM, and pages come in as the loader touches them.
//
// Path rules for TokenCorpus::open:
//   - contains * ? or [ : a glob(3), matches sorted by name, each match must be an llm.c shard `.bin`;
//   - ends in `.bin`    : one llm.c shard;
//   - anything else     : a text file read as bytes.
// Every problem is an nb::RuntimeError whose message names the file and the problem.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace nb {

constexpr int32_t kLlmcShardMagic = 20240520;
constexpr int32_t kLlmcShardVersion = 1;  // uint16 tokens
constexpr size_t kLlmcHeaderBytes = 256 * sizeof(int32_t);

enum class TokenFormat : uint8_t { text_bytes, llmc_shard };

// The tokens of one file. Movable, not copyable (it may own a memory mapping).
class TokenFile {
public:
    static TokenFile read_text(const std::string& path);
    static TokenFile map_llmc_shard(const std::string& path);

    TokenFile(TokenFile&& other) noexcept;
    TokenFile& operator=(TokenFile&& other) noexcept;
    TokenFile(const TokenFile&) = delete;
    TokenFile& operator=(const TokenFile&) = delete;
    ~TokenFile();

    const std::string& path() const { return path_; }
    std::span<const uint16_t> tokens() const;
    int64_t num_tokens() const { return static_cast<int64_t>(tokens().size()); }

private:
    TokenFile() = default;
    void unmap();

    std::string path_;
    std::vector<uint16_t> owned_;   // text files
    void* map_base_ = nullptr;      // shards: the whole file, mapped
    size_t map_bytes_ = 0;
    int64_t mapped_tokens_ = 0;     // shards: tokens after the header
};

// One or more token files, in order.
class TokenCorpus {
public:
    // See the path rules above.
    static TokenCorpus open(const std::string& path_or_glob);

    TokenCorpus(TokenCorpus&&) noexcept = default;
    TokenCorpus& operator=(TokenCorpus&&) noexcept = default;

    const std::string& source() const { return source_; }  // the path or glob given to open()
    TokenFormat format() const { return format_; }
    int num_files() const { return static_cast<int>(files_.size()); }
    int64_t num_tokens() const { return num_tokens_; }
    std::span<const uint16_t> file_tokens(int i) const { return files_.at(i).tokens(); }
    const std::string& file_path(int i) const { return files_.at(i).path(); }

    // The largest token id (so the caller can check it against the model's vocab). Scans every token on the
    // first call, which for shards reads the whole mapping, hence lazy; the answer is then cached.
    uint16_t max_token() const;

    // One line for the progress log, e.g. "3 llm.c shards 'data/*.bin' (1234567 tokens)".
    std::string describe() const;

private:
    TokenCorpus() = default;
    std::string source_;
    TokenFormat format_ = TokenFormat::text_bytes;
    std::vector<TokenFile> files_;
    int64_t num_tokens_ = 0;
    mutable int32_t max_token_ = -1;  // -1 until computed
};

// Writes an llm.c shard (version 1) atomically (src/core/atomic_file.h).
void write_llmc_shard(const std::string& path, const std::vector<uint16_t>& tokens);

}  // namespace nb

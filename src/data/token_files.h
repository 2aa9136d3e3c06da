// Token sources: a text file (one token per byte, vocab 256) or llm.c token shards.
//
// llm.c shard format (little-endian): a 1024-byte header of 256 int32 where header[0] = 20240520 (magic),
// header[1] = 1 (version: uint16 tokens), header[2] = number of tokens; then that many uint16 tokens.
//
// Text files are read into memory (they are small: a few MB). Shards are read where the loader needs them, one
// window at a time, with pread(2) from a descriptor held open for the run: a multi-GB shard costs neither RAM nor
// address space, and a shard that shrinks under the running job reads short, which is one error line naming it
// (a memory mapping would raise SIGBUS instead). The cost: one system call per window read (a few microseconds for
// 2049 tokens, page-cached: about 2 us more than a copy out of a mapping; docs/formats.md) and one open
// descriptor per shard (TokenCorpus::open raises the soft limit on open files to the hard one).
//
// Path rules for TokenCorpus::open:
//   - contains * ? or [ : a glob(3), matches sorted by name, each match must be an llm.c shard `.bin`;
//   - ends in `.bin`    : one llm.c shard;
//   - anything else     : a text file read as bytes.
// Every problem is an nb::RuntimeError whose message names the file and the problem.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace nb {

constexpr int32_t kLlmcShardMagic = 20240520;
constexpr int32_t kLlmcShardVersion = 1;  // uint16 tokens
constexpr size_t kLlmcHeaderBytes = 256 * sizeof(int32_t);

enum class TokenFormat : uint8_t { text_bytes, llmc_shard };

// The tokens of one file. Movable, not copyable (it may own a descriptor).
class TokenFile {
public:
    static TokenFile read_text(const std::string& path);
    static TokenFile open_llmc_shard(const std::string& path);

    TokenFile(TokenFile&& other) noexcept;
    TokenFile& operator=(TokenFile&& other) noexcept;
    TokenFile(const TokenFile&) = delete;
    TokenFile& operator=(const TokenFile&) = delete;
    ~TokenFile();

    const std::string& path() const { return path_; }
    int64_t num_tokens() const { return num_tokens_; }
    // Tokens [first, first + count) into `out`; nb::RuntimeError naming the file when it shrank since it was opened.
    void read(int64_t first, int64_t count, uint16_t* out) const;

private:
    TokenFile() = default;
    void close_file();

    std::string path_;
    std::vector<uint16_t> owned_;  // text files
    int fd_ = -1;                  // shards: open for the run
    int64_t file_bytes_ = 0;       // shards: the size when opened
    int64_t num_tokens_ = 0;
};

// The files `path_or_glob` names, by the path rules above: one path, or a glob's matches sorted bytewise (an
// nb::RuntimeError when none matches).
std::vector<std::string> token_file_paths(const std::string& path_or_glob);

// The format `path_or_glob` names by the path rules above (a glob or a `.bin` path: llm.c shards; else text bytes).
TokenFormat token_format_of(const std::string& path_or_glob);

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
    int64_t file_num_tokens(int i) const { return files_.at(i).num_tokens(); }
    const std::string& file_path(int i) const { return files_.at(i).path(); }
    // Tokens [first, first + count) of file i into `out` (TokenFile::read).
    void read_tokens(int i, int64_t first, int64_t count, uint16_t* out) const { files_.at(i).read(first, count, out); }
    // Every token of file i (tests; a shard's whole file is read).
    std::vector<uint16_t> file_tokens(int i) const;

    // The largest token id (so the caller can check it against the model's vocab). Scans every token on the
    // first call, which for shards reads the whole file, hence lazy; the answer is then cached.
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

#include "src/data/token_files.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <utility>

#include <fcntl.h>
#include <glob.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include "src/core/atomic_file.h"
#include "src/core/error.h"

namespace nb {

// Shards are little-endian and mapped as they are: no byte swapping.
static_assert(std::endian::native == std::endian::little, "llm.c shards are read in place on little-endian hosts");

namespace {

[[noreturn]] void fail(const std::string& path, const std::string& problem) {
    throw RuntimeError(fmt::format("data '{}': {}", path, problem));
}

bool has_glob_chars(const std::string& s) { return s.find_first_of("*?[") != std::string::npos; }

bool ends_with_bin(const std::string& s) { return s.size() >= 4 && s.compare(s.size() - 4, 4, ".bin") == 0; }

// Opens for reading and returns the descriptor and size, refusing directories and anything not a regular file.
int open_regular_file(const std::string& path, size_t* size_bytes) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail(path, fmt::format("cannot open: {}", std::strerror(errno)));
    struct stat st;
    if (::fstat(fd, &st) != 0) {
        int err = errno;
        ::close(fd);
        fail(path, fmt::format("cannot stat: {}", std::strerror(err)));
    }
    if (S_ISDIR(st.st_mode)) {
        ::close(fd);
        fail(path, "is a directory; expected a text file, an llm.c shard (.bin) or a glob of shards");
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        fail(path, "is not a regular file");
    }
    *size_bytes = static_cast<size_t>(st.st_size);
    return fd;
}

// Reads exactly size_bytes from fd (read(2) may return less than asked).
void read_exactly(int fd, void* dst, size_t size_bytes, const std::string& path) {
    uint8_t* p = static_cast<uint8_t*>(dst);
    while (size_bytes > 0) {
        ssize_t got = ::read(fd, p, size_bytes);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) fail(path, fmt::format("read failed: {}", std::strerror(errno)));
        if (got == 0) fail(path, "file shrank while being read");
        p += got;
        size_bytes -= static_cast<size_t>(got);
    }
}

// Checks the 256-int32 header against the file size; returns the number of tokens.
int64_t check_llmc_header(const int32_t* header, size_t file_bytes, const std::string& path) {
    if (header[0] != kLlmcShardMagic)
        fail(path, fmt::format("wrong magic {} in the header, expected {} (not an llm.c token shard)", header[0],
                               kLlmcShardMagic));
    if (header[1] != kLlmcShardVersion)
        fail(path, fmt::format("unsupported shard version {}, expected {} (uint16 tokens)", header[1],
                               kLlmcShardVersion));
    const int64_t header_tokens = header[2];
    const uint64_t token_bytes = file_bytes - kLlmcHeaderBytes;
    if (header_tokens < 0 || static_cast<uint64_t>(header_tokens) * sizeof(uint16_t) != token_bytes)
        fail(path, fmt::format("header says {} tokens but the file holds {} bytes of tokens (expected {})",
                               header_tokens, token_bytes, header_tokens * int64_t(sizeof(uint16_t))));
    if (header_tokens == 0) fail(path, "the shard holds zero tokens");
    return header_tokens;
}

}  // namespace

// ---- TokenFile ----

TokenFile TokenFile::read_text(const std::string& path) {
    size_t file_bytes = 0;
    int fd = open_regular_file(path, &file_bytes);
    std::vector<uint8_t> bytes(file_bytes);
    try {
        read_exactly(fd, bytes.data(), file_bytes, path);
    } catch (...) {
        ::close(fd);
        throw;
    }
    ::close(fd);
    if (file_bytes == 0) fail(path, "empty file (0 bytes), no tokens to train on");

    TokenFile f;
    f.path_ = path;
    f.owned_.assign(bytes.begin(), bytes.end());  // token = byte value, 0..255
    f.num_tokens_ = static_cast<int64_t>(f.owned_.size());
    return f;
}

TokenFile TokenFile::open_llmc_shard(const std::string& path) {
    size_t file_bytes = 0;
    int fd = open_regular_file(path, &file_bytes);
    int32_t header[256];
    try {
        if (file_bytes == 0) fail(path, "empty file (0 bytes), expected an llm.c token shard");
        if (file_bytes < kLlmcHeaderBytes)
            fail(path, fmt::format("truncated header: the file holds {} bytes, an llm.c shard header is {} bytes",
                                   file_bytes, kLlmcHeaderBytes));
        read_exactly(fd, header, kLlmcHeaderBytes, path);
        check_llmc_header(header, file_bytes, path);
    } catch (...) {
        ::close(fd);
        throw;
    }
    TokenFile f;
    f.path_ = path;
    f.fd_ = fd;
    f.file_bytes_ = static_cast<int64_t>(file_bytes);
    f.num_tokens_ = header[2];
    return f;
}

TokenFile::TokenFile(TokenFile&& other) noexcept
    : path_(std::move(other.path_)),
      owned_(std::move(other.owned_)),
      fd_(std::exchange(other.fd_, -1)),
      file_bytes_(std::exchange(other.file_bytes_, 0)),
      num_tokens_(std::exchange(other.num_tokens_, 0)) {}

TokenFile& TokenFile::operator=(TokenFile&& other) noexcept {
    if (this != &other) {
        close_file();
        path_ = std::move(other.path_);
        owned_ = std::move(other.owned_);
        fd_ = std::exchange(other.fd_, -1);
        file_bytes_ = std::exchange(other.file_bytes_, 0);
        num_tokens_ = std::exchange(other.num_tokens_, 0);
    }
    return *this;
}

TokenFile::~TokenFile() { close_file(); }

void TokenFile::close_file() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
}

void TokenFile::read(int64_t first, int64_t count, uint16_t* out) const {
    if (first < 0 || count < 0 || first + count > num_tokens_)
        throw std::out_of_range(
            fmt::format("data '{}': tokens [{}, {}) of {}", path_, first, first + count, num_tokens_));
    if (fd_ < 0) {
        std::copy_n(owned_.data() + first, count, out);
        return;
    }
    auto* dst = reinterpret_cast<uint8_t*>(out);
    size_t want = static_cast<size_t>(count) * sizeof(uint16_t);
    auto offset = static_cast<off_t>(kLlmcHeaderBytes + static_cast<size_t>(first) * sizeof(uint16_t));
    while (want > 0) {
        const ssize_t got = ::pread(fd_, dst, want, offset);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) fail(path_, fmt::format("read failed: {}", std::strerror(errno)));
        if (got == 0) {
            struct stat st{};
            const long long now = ::fstat(fd_, &st) == 0 ? static_cast<long long>(st.st_size) : -1;
            fail(path_, fmt::format("the file shrank while the run reads it: {} bytes now, {} when it was opened (a "
                                    "shard must not change under a running job)",
                                    now, file_bytes_));
        }
        dst += got, offset += got, want -= static_cast<size_t>(got);
    }
}

// ---- TokenCorpus ----

namespace {

// A corpus of many shards holds one descriptor per shard: as many as the hard limit allows.
void raise_open_file_limit() {
    struct rlimit limit{};
    if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
        limit.rlim_cur = limit.rlim_max;
        ::setrlimit(RLIMIT_NOFILE, &limit);
    }
}

std::vector<std::string> expand_glob(const std::string& pattern) {
    glob_t g{};
    // No GLOB_ERR: a folder in the pattern that does not exist means "no match", not a read error.
    int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
    std::vector<std::string> matches;
    if (rc == 0)
        for (size_t i = 0; i < g.gl_pathc; i++) matches.emplace_back(g.gl_pathv[i]);
    ::globfree(&g);
    if (rc == GLOB_NOMATCH || (rc == 0 && matches.empty()))
        throw RuntimeError(fmt::format("data: no file matches '{}'", pattern));
    if (rc != 0) throw RuntimeError(fmt::format("data: cannot expand the glob '{}' (read error)", pattern));
    // glob(3) sorts by the locale's collation; sort bytewise so the order is the same on every machine.
    std::sort(matches.begin(), matches.end());
    return matches;
}

}  // namespace

std::vector<std::string> token_file_paths(const std::string& path_or_glob) {
    if (path_or_glob.empty()) throw RuntimeError("data: the data path is empty");
    if (!has_glob_chars(path_or_glob)) return {path_or_glob};
    std::vector<std::string> matches = expand_glob(path_or_glob);
    for (const std::string& match : matches)
        if (!ends_with_bin(match))
            throw RuntimeError(fmt::format(
                "data: '{}' (matched by '{}') is not an llm.c shard: a glob may only match .bin shards", match,
                path_or_glob));
    return matches;
}

TokenFormat token_format_of(const std::string& path_or_glob) {
    return has_glob_chars(path_or_glob) || ends_with_bin(path_or_glob) ? TokenFormat::llmc_shard
                                                                       : TokenFormat::text_bytes;
}

TokenCorpus TokenCorpus::open(const std::string& path_or_glob) {
    TokenCorpus c;
    c.source_ = path_or_glob;
    const std::vector<std::string> paths = token_file_paths(path_or_glob);
    c.format_ = token_format_of(path_or_glob);
    if (c.format_ == TokenFormat::llmc_shard) raise_open_file_limit();
    for (const std::string& path : paths)
        c.files_.push_back(c.format_ == TokenFormat::llmc_shard ? TokenFile::open_llmc_shard(path)
                                                                 : TokenFile::read_text(path));
    for (const TokenFile& f : c.files_) c.num_tokens_ += f.num_tokens();
    return c;
}

std::vector<uint16_t> TokenCorpus::file_tokens(int i) const {
    std::vector<uint16_t> tokens(static_cast<size_t>(file_num_tokens(i)));
    read_tokens(i, 0, file_num_tokens(i), tokens.data());
    return tokens;
}

uint16_t TokenCorpus::max_token() const {
    if (max_token_ < 0) {
        constexpr int64_t kChunkTokens = int64_t{1} << 19;  // 1 MiB at a time
        std::vector<uint16_t> chunk;
        uint16_t m = 0;
        for (const TokenFile& f : files_)
            for (int64_t first = 0; first < f.num_tokens(); first += kChunkTokens) {
                chunk.resize(static_cast<size_t>(std::min(kChunkTokens, f.num_tokens() - first)));
                f.read(first, static_cast<int64_t>(chunk.size()), chunk.data());
                m = std::max(m, *std::max_element(chunk.begin(), chunk.end()));
            }
        max_token_ = m;
    }
    return static_cast<uint16_t>(max_token_);
}

std::string TokenCorpus::describe() const {
    if (format_ == TokenFormat::text_bytes)
        return fmt::format("text file '{}' ({} tokens, bytes, vocab 256)", source_, num_tokens_);
    return fmt::format("{} llm.c shard{} '{}' ({} tokens)", files_.size(), files_.size() == 1 ? "" : "s", source_,
                       num_tokens_);
}

// ---- writing shards ----

void write_llmc_shard(const std::string& path, const std::vector<uint16_t>& tokens) {
    if (tokens.size() > static_cast<size_t>(INT32_MAX))
        throw RuntimeError(fmt::format("data '{}': {} tokens do not fit an llm.c shard header (at most {})", path,
                                       tokens.size(), INT32_MAX));
    int32_t header[256] = {};
    header[0] = kLlmcShardMagic;
    header[1] = kLlmcShardVersion;
    header[2] = static_cast<int32_t>(tokens.size());

    std::string bytes(reinterpret_cast<const char*>(header), kLlmcHeaderBytes);
    bytes.append(reinterpret_cast<const char*>(tokens.data()), tokens.size() * sizeof(uint16_t));
    try {
        write_file_atomically(path, bytes);
    } catch (const RuntimeError& e) {
        throw RuntimeError(fmt::format("data '{}': {}", path, e.what()));
    }
}

}  // namespace nb

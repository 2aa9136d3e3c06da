#include "src/data/data_fingerprint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "src/core/error.h"
#include "src/core/sha256.h"
#include "src/data/token_files.h"

namespace nb {

namespace {

constexpr int64_t kBlockBytes = int64_t{64} << 10;
constexpr int64_t kBlocks = 16;

[[noreturn]] void fail(const std::string& path, const char* what) {
    throw RuntimeError(fmt::format("data '{}': cannot {} to fingerprint it: {}", path, what, std::strerror(errno)));
}

// `bytes` bytes at `offset` into the hash.
void hash_range(Sha256& hash, int fd, int64_t offset, int64_t bytes, std::vector<char>& buffer,
                const std::string& path) {
    buffer.resize(static_cast<size_t>(kBlockBytes));
    while (bytes > 0) {
        const ssize_t got = ::pread(fd, buffer.data(), static_cast<size_t>(std::min(bytes, kBlockBytes)), offset);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) {
            if (got == 0) errno = EIO;  // shorter than its size a moment ago
            fail(path, "read");
        }
        hash.update(buffer.data(), static_cast<size_t>(got));
        offset += got, bytes -= got;
    }
}

}  // namespace

DataFileFingerprint fingerprint_data_file(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail(path, "open");
    struct stat st{};
    if (::fstat(fd, &st) != 0) {
        ::close(fd);
        fail(path, "stat");
    }
    const int64_t size = st.st_size;
    Sha256 hash;
    uint8_t size_le[8];
    for (int i = 0; i < 8; ++i) size_le[i] = static_cast<uint8_t>(static_cast<uint64_t>(size) >> (8 * i));
    hash.update(size_le, sizeof size_le);
    std::vector<char> buffer;
    try {
        if (size <= kBlocks * kBlockBytes) {
            hash_range(hash, fd, 0, size, buffer, path);
        } else {
            // Block k at floor(k / 15 of the last block's offset): the first, the last and evenly spaced ones
            // between (written as q k + r k / 15 so that no product overflows).
            const int64_t last = size - kBlockBytes, q = last / (kBlocks - 1), r = last % (kBlocks - 1);
            for (int64_t k = 0; k < kBlocks; ++k)
                hash_range(hash, fd, q * k + r * k / (kBlocks - 1), kBlockBytes, buffer, path);
        }
    } catch (...) {
        ::close(fd);
        throw;
    }
    ::close(fd);
    return {path, size, Sha256::hex(hash.digest())};
}

std::vector<DataFileFingerprint> fingerprint_data(const std::string& path_or_glob) {
    std::vector<DataFileFingerprint> out;
    if (path_or_glob.empty()) return out;
    for (const std::string& path : token_file_paths(path_or_glob)) out.push_back(fingerprint_data_file(path));
    return out;
}

}  // namespace nb

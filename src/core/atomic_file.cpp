#include "src/core/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "src/core/error.h"

namespace nb {

namespace {

[[noreturn]] void fail(const std::string& what, const std::string& path) {
    throw RuntimeError(fmt::format("{} '{}': {}", what, path, std::strerror(errno)));
}

}  // namespace

void write_all(int fd, std::string_view bytes, const std::string& path) {
    size_t done = 0;
    while (done < bytes.size()) {
        const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
        if (n < 0 && errno == EINTR) continue;  // a signal (SIGTERM's save request) interrupted the write
        if (n <= 0) fail("cannot write", path);
        done += static_cast<size_t>(n);
    }
}

void sync_directory(const std::string& dir) {
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
    if (fd < 0) fail("cannot open directory", dir);
    const int rc = ::fsync(fd);
    ::close(fd);
    if (rc != 0) fail("cannot fsync directory", dir);
}

std::string temporary_path_of(const std::string& path) { return fmt::format("{}.tmp.{}", path, ::getpid()); }

void write_file_atomically(const std::string& path, std::string_view bytes) {
    write_file_atomically(path, std::vector<std::string_view>{bytes});
}

void write_file_atomically(const std::string& path, const std::vector<std::string_view>& pieces) {
    const std::string tmp = temporary_path_of(path);
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) fail("cannot create", tmp);
    try {
        for (const std::string_view piece : pieces) write_all(fd, piece, tmp);
        if (::fsync(fd) != 0) fail("cannot fsync", tmp);
    } catch (...) {
        ::close(fd);
        ::unlink(tmp.c_str());
        throw;
    }
    if (::close(fd) != 0) {
        ::unlink(tmp.c_str());
        fail("cannot close", tmp);
    }
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
        ::unlink(tmp.c_str());
        fail("cannot rename onto", path);
    }
    const std::string dir = std::filesystem::path(path).parent_path().string();
    sync_directory(dir.empty() ? "." : dir);
}

std::string read_whole_file(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail("cannot open", path);
    std::string bytes;
    char buffer[1 << 16];
    for (;;) {
        const ssize_t n = ::read(fd, buffer, sizeof buffer);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            ::close(fd);
            fail("cannot read", path);
        }
        if (n == 0) break;
        bytes.append(buffer, static_cast<size_t>(n));
    }
    ::close(fd);
    return bytes;
}

}  // namespace nb

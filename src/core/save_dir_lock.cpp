#include "src/core/save_dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <utility>

#include <fmt/format.h>

#include "src/core/atomic_file.h"
#include "src/core/byte_size.h"
#include "src/core/error.h"

namespace nb {

namespace fs = std::filesystem;

namespace {

void create_directory(const std::string& dir) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (!ec && !fs::is_directory(dir, ec)) ec = std::make_error_code(std::errc::not_a_directory);
    if (ec) throw UsageError(fmt::format("--save '{}': cannot create the directory: {}", dir, ec.message()));
}

// "host H, pid P, started 2024-05-01T10:00:00Z": who holds the lock, as the holder writes it.
std::string holder_text() {
    char host[HOST_NAME_MAX + 1] = {};
    if (::gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "?");
    const std::time_t now = std::time(nullptr);
    std::tm utc{};
    ::gmtime_r(&now, &utc);
    char started[32];
    std::strftime(started, sizeof started, "%Y-%m-%dT%H:%M:%SZ", &utc);
    return fmt::format("host {}, pid {}, started {}", host, ::getpid(), started);
}

// The holder's line as it wrote it, for the message only: at most one line of printable text.
std::string read_holder(int fd) {
    char buffer[256];
    const ssize_t n = ::pread(fd, buffer, sizeof buffer, 0);
    std::string text;
    for (ssize_t i = 0; i < n && buffer[i] != '\n'; ++i)
        text += (buffer[i] >= 0x20 && buffer[i] < 0x7f) ? buffer[i] : '?';
    return text.empty() ? "which has not written its name into the lock file yet" : text;
}

void write_holder(int fd, const std::string& lock_path, const std::string& dir) {
    try {
        if (::ftruncate(fd, 0) != 0)
            throw RuntimeError(fmt::format("cannot truncate '{}': {}", lock_path, std::strerror(errno)));
        write_all(fd, holder_text() + "\n", lock_path);
    } catch (const RuntimeError& e) {
        throw UsageError(fmt::format("--save '{}' is not writable: {}", dir, e.what()));
    }
}

// Locks `fd` or says why not; the descriptor is closed on every error.
void lock_or_throw(int fd, const std::string& lock_path, const std::string& dir) {
    int rc;
    do rc = ::flock(fd, LOCK_EX | LOCK_NB);
    while (rc != 0 && errno == EINTR);
    if (rc == 0) return;
    const int error = errno;
    const std::string holder = error == EWOULDBLOCK ? read_holder(fd) : "";
    ::close(fd);
    if (error == EWOULDBLOCK)
        throw UsageError(fmt::format("--save '{}' is in use by another run ({}); two runs must not write into one "
                                     "checkpoint directory: wait for it to end or choose another --save DIR",
                                     dir, holder));
    throw UsageError(fmt::format("--save '{}': cannot lock '{}': {} (the file system must support flock; Lustre: "
                                 "mount with -o flock)",
                                 dir, lock_path, std::strerror(error)));
}

// One checkpoint's bytes with room to spare: 10% more and 1 MiB for the files' names and shapes, the manifest
// and the temporary names they are written under.
int64_t with_margin(int64_t bytes) { return bytes + bytes / 10 + (int64_t{1} << 20); }

// Room for the run's peak. Checkpoints already in DIR are not counted: they use no free space, and the older ones
// among them that --save-keep prunes free theirs only once newer ones are complete.
void require_room(const std::string& dir, int64_t checkpoint_bytes, int64_t peak_checkpoints) {
    const std::optional<int64_t> free = free_disk_bytes(dir);
    const int64_t one = with_margin(checkpoint_bytes);
    const int64_t need = one > INT64_MAX / std::max<int64_t>(peak_checkpoints, 1) ? INT64_MAX : one * peak_checkpoints;
    if (!free || need <= *free) return;
    throw UsageError(fmt::format("--save '{}': {} checkpoint{} of about {} (the weights, weight versions and optimizer "
                                 "state of every stage, with 10% and 1 MiB to spare; --save-keep K holds K + 1 while "
                                 "one is written) need {} but its file system has {} free",
                                 dir, peak_checkpoints, peak_checkpoints == 1 ? "" : "s", format_bytes(one),
                                 format_bytes(need), format_bytes(*free)));
}

}  // namespace

SaveDirLock SaveDirLock::claim(const std::string& dir, int64_t checkpoint_bytes, int64_t peak_checkpoints) {
    create_directory(dir);
    const std::string lock_path = (fs::path(dir) / kSaveLockFile).string();
    const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        throw UsageError(fmt::format("--save '{}' is not writable: cannot create '{}': {}", dir, lock_path,
                                     std::strerror(errno)));
    lock_or_throw(fd, lock_path, dir);
    SaveDirLock lock(fd);  // from here on the destructor closes it, releasing the lock
    write_holder(fd, lock_path, dir);
    require_room(dir, checkpoint_bytes, peak_checkpoints);
    return lock;
}

SaveDirLock::SaveDirLock(SaveDirLock&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}

SaveDirLock& SaveDirLock::operator=(SaveDirLock&& other) noexcept {
    if (this != &other) {
        if (fd_ >= 0) ::close(fd_);
        fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
}

SaveDirLock::~SaveDirLock() {
    if (fd_ >= 0) ::close(fd_);
}

std::optional<int64_t> free_disk_bytes(const std::string& dir) {
    struct statvfs s{};
    if (::statvfs(dir.c_str(), &s) != 0) return std::nullopt;
    return static_cast<int64_t>(s.f_bavail) * static_cast<int64_t>(s.f_frsize);
}

}  // namespace nb

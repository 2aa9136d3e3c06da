#include "src/run/hf_bench.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <limits>
#include <vector>

#include <fmt/format.h>

#include "model/stage_model.h"
#include "src/core/atomic_file.h"
#include "src/core/error.h"
#include "src/run/checkpoint_bench.h"
#include "src/run/hf_folder.h"

namespace nb {

namespace fs = std::filesystem;

namespace {

void drop_folder_from_page_cache(const std::string& dir) {
    for (const auto& entry : fs::directory_iterator(dir)) drop_from_page_cache(entry.path().string());
}

// As many bytes as `bytes` in 1 MiB pieces of one buffer, for time_plain_write_s.
std::vector<std::string_view> pieces_of(const std::string& buffer, int64_t bytes) {
    std::vector<std::string_view> pieces;
    for (int64_t left = bytes; left > 0; left -= static_cast<int64_t>(buffer.size())) {
        const auto size = static_cast<size_t>(std::min<int64_t>(left, static_cast<int64_t>(buffer.size())));
        pieces.push_back(std::string_view(buffer).substr(0, size));
    }
    return pieces;
}

// The file by plain read() calls of 8 MiB into one buffer (from the disk: dropped from the page cache first).
double time_plain_read_s(const std::string& path) {
    drop_from_page_cache(path);
    std::vector<char> buffer(8 << 20);
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw RuntimeError(fmt::format("cannot open '{}': {}", path, std::strerror(errno)));
    const double seconds = seconds_of([&] {
        while (true) {
            const ssize_t n = ::read(fd, buffer.data(), buffer.size());
            if (n == 0) break;
            if (n < 0 && errno != EINTR)
                throw RuntimeError(fmt::format("cannot read '{}': {}", path, std::strerror(errno)));
        }
    });
    ::close(fd);
    return seconds;
}

}  // namespace

HfTiming time_hf_folder(const ModelConfig& model, const std::string& dir, int reps) {
    const NamedWeights weights = initial_named_weights(model, 1234);
    HfModelConfig config;
    config.model = model;
    constexpr double kNever = std::numeric_limits<double>::infinity();
    HfTiming t{0, kNever, kNever, kNever, kNever};
    const std::string pattern(1 << 20, 'x');
    for (int r = 1; r <= reps; ++r) {
        const std::string out = (fs::path(dir) / fmt::format("hf_{}", r)).string();
        t.export_s = std::min(t.export_s, seconds_of([&] { write_hf_folder(config, weights, {out}); }));
        const std::string file = (fs::path(out) / "model.safetensors").string();
        t.file_bytes = static_cast<int64_t>(fs::file_size(file));
        drop_folder_from_page_cache(out);
        t.import_s = std::min(t.import_s, seconds_of([&] { read_hf_folder(out); }));
        t.disk_read_s = std::min(t.disk_read_s, time_plain_read_s(file));
        fs::remove_all(out);
        const std::string plain = (fs::path(dir) / "plain_write.bin").string();
        t.disk_write_s = std::min(t.disk_write_s, time_plain_write_s(plain, pieces_of(pattern, t.file_bytes)));
    }
    return t;
}

}  // namespace nb

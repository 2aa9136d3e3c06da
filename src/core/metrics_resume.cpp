#include "src/core/metrics_resume.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <string_view>

#include <fmt/format.h>

#include "src/core/error.h"
#include "src/core/json_reader.h"

namespace nb {

namespace {

constexpr int64_t kFirstWindowBytes = 64 * 1024;  // doubled until it reaches back to the cut

struct RecordKey {
    int64_t step;
    std::optional<double> elapsed_s;
};

// The step (and elapsed_s) of one line, when it is a record this program writes: a JSON object with an integer
// step.
std::optional<RecordKey> record_key(std::string_view line) {
    try {
        const Json value = read_json(line, "metrics line");
        if (!value.is_object()) return std::nullopt;
        const auto step = value.find("step");
        if (step == value.end() || !step->is_number()) return std::nullopt;
        RecordKey key{json_int64(*step, "metrics line", "step"), std::nullopt};
        if (const auto e = value.find("elapsed_s"); e != value.end() && e->is_number())
            key.elapsed_s = json_number(*e, "metrics line", "elapsed_s");
        return key;
    } catch (const RuntimeError&) {
        return std::nullopt;  // not one of ours: it stays
    }
}

int64_t file_size(const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0)
        throw RuntimeError(fmt::format("metrics '{}': cannot read: {}", path, std::strerror(errno)));
    return static_cast<int64_t>(st.st_size);
}

std::string read_range(const std::string& path, int64_t begin, int64_t end) {
    std::ifstream in(path, std::ios::binary);
    std::string bytes(static_cast<size_t>(end - begin), '\0');
    if (!in.seekg(begin) || !in.read(bytes.data(), static_cast<std::streamsize>(bytes.size())))
        throw RuntimeError(fmt::format("metrics '{}': cannot read bytes {}..{}", path, begin, end));
    return bytes;
}

// The cut within the window [begin, size) of the file (`bytes`), when the window reaches back far enough to
// decide it: scanning the complete lines from the end, the end of the first line that stays.
std::optional<MetricsCut> cut_in_window(const std::string& bytes, int64_t begin, int64_t step) {
    MetricsCut cut;
    size_t line_end = bytes.rfind('\n');  // a last line without newline was cut short by a kill: it goes
    if (line_end == std::string::npos) return begin == 0 ? std::optional(cut) : std::nullopt;
    while (true) {
        const size_t newline_before = line_end == 0 ? std::string::npos : bytes.rfind('\n', line_end - 1);
        if (newline_before == std::string::npos && begin > 0) return std::nullopt;  // the line may start earlier
        const size_t line_begin = newline_before == std::string::npos ? 0 : newline_before + 1;
        const auto key = record_key(std::string_view(bytes).substr(line_begin, line_end - line_begin));
        if (!key || key->step <= step) {
            cut.offset = begin + static_cast<int64_t>(line_end) + 1;
            if (key) cut.last_elapsed_s = key->elapsed_s;
            return cut;
        }
        ++cut.dropped_records;
        if (line_begin == 0) return cut;  // every line of the file goes
        line_end = newline_before;
    }
}

}  // namespace

MetricsCut find_metrics_cut(const std::string& path, int64_t step) {
    const int64_t size = file_size(path);
    for (int64_t window = kFirstWindowBytes;; window *= 2) {
        const int64_t begin = std::max<int64_t>(0, size - window);
        if (const auto cut = cut_in_window(read_range(path, begin, size), begin, step)) return *cut;
    }
}

MetricsCut drop_metrics_after(const std::string& path, int64_t step) {
    if (::access(path.c_str(), F_OK) != 0) return {};
    const int64_t size = file_size(path);
    const MetricsCut cut = find_metrics_cut(path, step);
    if (cut.offset < size && ::truncate(path.c_str(), static_cast<off_t>(cut.offset)) != 0)
        throw RuntimeError(fmt::format("metrics '{}': cannot drop the records after step {}: {}", path, step,
                                       std::strerror(errno)));
    return cut;
}

}  // namespace nb

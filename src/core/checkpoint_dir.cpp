#include "src/core/checkpoint_dir.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <future>
#include <stdexcept>

#include <fmt/format.h>

#include "src/core/atomic_file.h"
#include "src/core/error.h"
#include "src/core/metrics_writer.h"
#include "src/core/sha256.h"

namespace nb {

namespace fs = std::filesystem;

namespace {

constexpr const char* kManifest = "manifest.json";

std::string manifest_path(const std::string& step_dir) { return (fs::path(step_dir) / kManifest).string(); }

// The step of a directory named step_<t>, or -1.
int64_t step_of(const fs::path& p) {
    const std::string name = p.filename().string();
    if (name.rfind("step_", 0) != 0 || name.size() == 5) return -1;
    int64_t step = -1;
    const auto [end, ec] = std::from_chars(name.data() + 5, name.data() + name.size(), step);
    return ec == std::errc() && end == name.data() + name.size() && step >= 0 ? step : -1;
}

// The complete checkpoints under `dir`, by step.
std::map<int64_t, fs::path> complete_steps(const std::string& dir) {
    std::map<int64_t, fs::path> steps;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
        const int64_t step = step_of(entry.path());
        if (step >= 0 && fs::is_regular_file(entry.path() / kManifest)) steps[step] = entry.path();
    }
    return steps;
}

}  // namespace

std::string stage_file_name(int stage) { return fmt::format("stage_{}.bin", stage); }

std::string make_step_dir(const std::string& dir, int64_t step) {
    const fs::path p = fs::path(dir) / fmt::format("step_{}", step);
    std::error_code ec;
    fs::create_directories(p, ec);
    if (ec) throw RuntimeError(fmt::format("--save '{}': cannot create '{}': {}", dir, p.string(), ec.message()));
    return p.string();
}

CheckpointEntry write_checkpoint_file(const std::string& step_dir, const std::string& name, const std::string& bytes) {
    return write_checkpoint_file(step_dir, name, std::vector<std::string_view>{bytes});
}

CheckpointEntry write_checkpoint_file(const std::string& step_dir, const std::string& name,
                                      const std::vector<std::string_view>& pieces) {
    // The checksum is computed on another thread while this one writes and fsyncs: the two take about as long
    // (sha256 ~1.5 GB/s with the SHA extensions, a disk ~1-2 GB/s), so the save takes one of them, not both.
    auto sha256 = std::async(std::launch::async, [&pieces] { return Sha256::hex_of(pieces); });
    write_file_atomically((fs::path(step_dir) / name).string(), pieces);  // on an error, ~future waits for the hash
    int64_t bytes = 0;
    for (const std::string_view piece : pieces) bytes += static_cast<int64_t>(piece.size());
    return {name, bytes, sha256.get()};
}

void write_manifest(const std::string& step_dir, int64_t step, const std::vector<CheckpointEntry>& entries,
                    const std::string& run_json) {
    std::string files;
    for (const CheckpointEntry& e : entries)
        files += fmt::format("{}\n    {{\"name\": {}, \"bytes\": {}, \"sha256\": {}}}", files.empty() ? "" : ",",
                             json_quote(e.name), e.bytes, json_quote(e.sha256));
    const std::string text = fmt::format("{{\n  \"format\": {},\n  \"step\": {},\n  \"files\": [{}\n  ],\n  \"run\": {}\n}}\n",
                                         kCheckpointFormat, step, files, run_json);
    parse_json(text, "the manifest being written");  // run_json must be JSON: never write a manifest we cannot read
    write_file_atomically(manifest_path(step_dir), text);
}

std::string find_checkpoint(const std::string& path) {
    if (fs::is_regular_file(fs::path(path) / kManifest)) return path;
    const auto steps = complete_steps(path);
    if (steps.empty())
        throw RuntimeError(fmt::format("--load '{}': no complete checkpoint there (a step_<t> directory with a {})",
                                       path, kManifest));
    return steps.rbegin()->second.string();
}

namespace {

void check_file_size(const std::string& file, int64_t want_bytes) {
    std::error_code ec;
    const auto size = fs::file_size(file, ec);
    if (ec) throw RuntimeError(fmt::format("'{}': cannot read: {}", file, ec.message()));
    if (static_cast<int64_t>(size) != want_bytes)
        throw RuntimeError(fmt::format("'{}': {} bytes, the manifest's field 'bytes' says {} (truncated?)", file, size,
                                       want_bytes));
}

}  // namespace

LoadedCheckpoint read_checkpoint(const std::string& step_dir, const std::set<std::string>* only) {
    const std::string path = manifest_path(step_dir);
    const JsonValue manifest = parse_json(read_whole_file(path), path);
    const auto& top = manifest.object(path, "the manifest");
    const int64_t format = json_field(top, "format", path).int64(path, "format");
    if (format != kCheckpointFormat)
        throw RuntimeError(fmt::format("'{}': field 'format' is {}, this nobubble reads format {}", path, format,
                                       kCheckpointFormat));
    LoadedCheckpoint c{step_dir, json_field(top, "step", path).int64(path, "step"), json_field(top, "run", path), {}};
    json_field(top, "run", path).object(path, "run");
    for (const JsonValue& f : json_field(top, "files", path).array(path, "files")) {
        const auto& entry = f.object(path, "files[]");
        const std::string& name = json_field(entry, "name", path).string(path, "name");
        if (name.empty() || name.find('/') != std::string::npos || name == kManifest)
            throw RuntimeError(fmt::format("'{}': field 'name' is '{}', not a file of the checkpoint", path, name));
        const std::string file = (fs::path(step_dir) / name).string();
        const int64_t want_bytes = json_field(entry, "bytes", path).int64(path, "bytes");
        if (only && !only->contains(name)) {
            check_file_size(file, want_bytes);
            continue;
        }
        std::string bytes = read_whole_file(file);
        if (static_cast<int64_t>(bytes.size()) != want_bytes)
            throw RuntimeError(fmt::format("'{}': {} bytes, the manifest's field 'bytes' says {} (truncated?)", file,
                                           bytes.size(), want_bytes));
        const std::string& want_sha = json_field(entry, "sha256", path).string(path, "sha256");
        if (Sha256::hex_of(bytes.data(), bytes.size()) != want_sha)
            throw RuntimeError(fmt::format("'{}': its sha256 differs from the manifest's field 'sha256' (damaged)", file));
        if (!c.files.emplace(name, std::move(bytes)).second)
            throw RuntimeError(fmt::format("'{}': the file '{}' is listed twice", path, name));
    }
    return c;
}

void prune_checkpoints(const std::string& dir, int keep) {
    if (keep < 1) throw std::invalid_argument(fmt::format("prune_checkpoints: keep {} < 1", keep));
    const auto steps = complete_steps(dir);
    if (static_cast<int64_t>(steps.size()) <= keep) return;
    const int64_t oldest_kept = std::next(steps.rbegin(), keep - 1)->first;
    std::vector<fs::path> older;  // listed first: removing entries while iterating is unspecified
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(dir, ec))
        if (const int64_t step = step_of(entry.path()); step >= 0 && step < oldest_kept) older.push_back(entry.path());
    for (const fs::path& p : older) {
        fs::remove(p / kManifest, ec);  // first: from here on it is not a checkpoint any more
        fs::remove_all(p, ec);
    }
    sync_directory(dir);
}

}  // namespace nb

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
constexpr std::string_view kStagingSuffix = ".saving";    // a save being written (complete once it has a manifest)
constexpr std::string_view kReplacedSuffix = ".replaced";  // an earlier save of the step, on its way out

std::string manifest_path(const std::string& step_dir) { return (fs::path(step_dir) / kManifest).string(); }
bool has_manifest(const fs::path& dir) { return fs::is_regular_file(dir / kManifest); }

std::string step_name(int64_t step) { return fmt::format("step_{}", step); }

// What a name under DIR is: step_<t> (suffix ""), step_<t>.saving, step_<t>.replaced; step -1 for anything else.
struct StepDirName {
    int64_t step = -1;
    std::string_view suffix;
};

StepDirName step_dir_name(const fs::path& p) {
    const std::string name = p.filename().string();
    if (name.rfind("step_", 0) != 0) return {};
    std::string_view digits(name);
    digits.remove_prefix(5);
    std::string_view suffix;
    for (const std::string_view s : {kStagingSuffix, kReplacedSuffix})
        if (digits.ends_with(s)) suffix = s, digits.remove_suffix(s.size());
    int64_t step = -1;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), step);
    if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size() || step < 0) return {};
    return {step, suffix};
}

// The complete checkpoints under `dir`, by step: step_<t>, or where only its staging folder is complete (a save
// killed between the switch's renames), that.
std::map<int64_t, fs::path> complete_steps(const std::string& dir) {
    std::map<int64_t, fs::path> steps;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
        const StepDirName n = step_dir_name(entry.path());
        if (n.step < 0 || n.suffix == kReplacedSuffix || !has_manifest(entry.path())) continue;
        if (n.suffix.empty()) steps[n.step] = entry.path();
        else steps.emplace(n.step, entry.path());  // step_<t> replaces it, whichever is listed first
    }
    return steps;
}

// A step directory out of the way: its manifest first (from then on it is no checkpoint), then the rest.
void remove_step_dir(const fs::path& p) {
    std::error_code ec;
    fs::remove(p / kManifest, ec);
    fs::remove_all(p, ec);
}

void rename_or_throw(const fs::path& from, const fs::path& to) {
    std::error_code ec;
    fs::rename(from, to, ec);
    if (ec) throw RuntimeError(fmt::format("cannot rename '{}' to '{}': {}", from.string(), to.string(), ec.message()));
}

// The switch (see checkpoint_dir.h): an earlier step_<t> aside, the complete staging folder into its name.
void switch_into_place(const fs::path& staging, const fs::path& target, const SaveStepHook& at) {
    const fs::path dir = target.parent_path();
    const fs::path replaced = target.string() + std::string(kReplacedSuffix);
    std::error_code ec;
    const bool resave = fs::exists(target, ec);
    if (resave) {
        remove_step_dir(replaced);  // a killed switch's leftover
        rename_or_throw(target, replaced);
        sync_directory(dir.string());
    }
    if (at) at(SaveStep::switch_names, target.string());
    rename_or_throw(staging, target);
    sync_directory(dir.string());
    if (resave) {
        remove_step_dir(replaced);
        sync_directory(dir.string());
    }
}

// A complete staging folder left by a switch killed between its renames: into its step's name, or removed where a
// complete step_<t> is there.
void settle_staging(const fs::path& staging, const fs::path& named) {
    if (has_manifest(named)) {
        remove_step_dir(staging);
        return;
    }
    remove_step_dir(named);
    rename_or_throw(staging, named);
}

// "stage_0.bin.tmp.1234": what write_file_atomically leaves when killed.
bool is_stray_temporary(const fs::path& p) {
    const std::string name = p.filename().string();
    const size_t at = name.rfind(".tmp.");
    if (at == std::string::npos || at + 5 == name.size()) return false;
    return std::all_of(name.begin() + static_cast<std::ptrdiff_t>(at + 5), name.end(),
                       [](char c) { return c >= '0' && c <= '9'; });
}

void remove_stray_temporaries(const fs::path& dir) {
    std::vector<fs::path> stray;  // listed first: removing entries while iterating is unspecified
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(dir, ec))
        if (entry.is_regular_file(ec) && is_stray_temporary(entry.path())) stray.push_back(entry.path());
    for (const fs::path& p : stray) fs::remove(p, ec);
}

}  // namespace

std::string stage_file_name(int stage, int64_t format) {
    return fmt::format("stage_{}.{}", stage, format == 1 ? "bin" : "safetensors");
}

std::string make_staging_dir(const std::string& dir, int64_t step) {
    const fs::path p = fs::path(dir) / (step_name(step) + std::string(kStagingSuffix));
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

std::string write_manifest(const std::string& staging_dir, int64_t step, const std::vector<CheckpointEntry>& entries,
                           const std::string& run_json, const SaveStepHook& at) {
    std::string files;
    for (const CheckpointEntry& e : entries)
        files += fmt::format("{}\n    {{\"name\": {}, \"bytes\": {}, \"sha256\": {}}}", files.empty() ? "" : ",",
                             json_quote(e.name), e.bytes, json_quote(e.sha256));
    const std::string text = fmt::format("{{\n  \"format\": {},\n  \"step\": {},\n  \"files\": [{}\n  ],\n  \"run\": {}\n}}\n",
                                         kCheckpointFormat, step, files, run_json);
    read_json(text, "the manifest being written");  // run_json must be JSON: never write a manifest we cannot read
    if (at) at(SaveStep::manifest, manifest_path(staging_dir));
    write_file_atomically(manifest_path(staging_dir), text);
    const fs::path target = fs::path(staging_dir).parent_path() / step_name(step);
    switch_into_place(staging_dir, target, at);
    return target.string();
}

std::string find_checkpoint(const std::string& path) {
    if (has_manifest(path)) return path;
    fs::path named = fs::path(path).lexically_normal();
    if (!named.has_filename()) named = named.parent_path();  // "DIR/step_20/"
    const fs::path staging = named.string() + std::string(kStagingSuffix);
    if (step_dir_name(named).step >= 0 && has_manifest(staging)) return staging.string();  // a switch was killed
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
    const Json top = read_json(read_whole_file(path), path);
    const int64_t format = json_int64(json_at(top, "format", path), path, "format");
    if (format < kOldestCheckpointFormat || format > kCheckpointFormat)
        throw RuntimeError(fmt::format("'{}': field 'format' is {}, this nobubble reads formats {} to {}", path, format,
                                       kOldestCheckpointFormat, kCheckpointFormat));
    LoadedCheckpoint c{step_dir, json_int64(json_at(top, "step", path), path, "step"), format,
                       json_object(json_at(top, "run", path), path, "run"), {}};
    for (const Json& entry : json_array(json_at(top, "files", path), path, "files")) {
        const std::string& name = json_string(json_at(entry, "name", path), path, "name");
        if (name.empty() || name.find('/') != std::string::npos || name == kManifest)
            throw RuntimeError(fmt::format("'{}': field 'name' is '{}', not a file of the checkpoint", path, name));
        const std::string file = (fs::path(step_dir) / name).string();
        const int64_t want_bytes = json_int64(json_at(entry, "bytes", path), path, "bytes");
        if (only && !only->contains(name)) {
            check_file_size(file, want_bytes);
            continue;
        }
        std::string bytes = read_whole_file(file);
        if (static_cast<int64_t>(bytes.size()) != want_bytes)
            throw RuntimeError(fmt::format("'{}': {} bytes, the manifest's field 'bytes' says {} (truncated?)", file,
                                           bytes.size(), want_bytes));
        const std::string& want_sha = json_string(json_at(entry, "sha256", path), path, "sha256");
        if (Sha256::hex_of(bytes.data(), bytes.size()) != want_sha)
            throw RuntimeError(fmt::format("'{}': its sha256 differs from the manifest's field 'sha256' (damaged)", file));
        if (!c.files.emplace(name, std::move(bytes)).second)
            throw RuntimeError(fmt::format("'{}': the file '{}' is listed twice", path, name));
    }
    return c;
}

void prune_checkpoints(const std::string& dir, int keep, const SaveStepHook& at) {
    if (keep < 1) throw std::invalid_argument(fmt::format("prune_checkpoints: keep {} < 1", keep));
    const auto steps = complete_steps(dir);
    if (static_cast<int64_t>(steps.size()) <= keep) return;
    const int64_t oldest_kept = std::next(steps.rbegin(), keep - 1)->first;
    // Every folder of an older step but a staging one without a manifest: that may be a save still being written
    // (stale ones are remove_stale_saves's).
    std::vector<fs::path> older;  // listed first: removing entries while iterating is unspecified
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
        const StepDirName n = step_dir_name(entry.path());
        if (n.step >= 0 && n.step < oldest_kept && (n.suffix != kStagingSuffix || has_manifest(entry.path())))
            older.push_back(entry.path());
    }
    for (const fs::path& p : older) {
        fs::remove(p / kManifest, ec);  // first: from here on it is not a checkpoint any more
        if (at) at(SaveStep::prune, p.string());
        fs::remove_all(p, ec);
    }
    sync_directory(dir);
}

void settle_complete_staging(const std::string& dir) {
    std::vector<fs::path> complete;  // listed first: renaming entries while iterating is unspecified
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(dir, ec))
        if (const StepDirName n = step_dir_name(entry.path()); n.suffix == kStagingSuffix && has_manifest(entry.path()))
            complete.push_back(entry.path());
    for (const fs::path& p : complete) settle_staging(p, fs::path(dir) / step_name(step_dir_name(p).step));
    if (!complete.empty()) sync_directory(dir);
}

void remove_stale_saves(const std::string& dir, const std::string& resuming_from) {
    const auto is_resume_source = [&](const fs::path& p) {
        std::error_code ec;
        return !resuming_from.empty() && fs::equivalent(p, resuming_from, ec);
    };
    std::vector<fs::path> entries;  // listed first: removing entries while iterating is unspecified
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(dir, ec)) entries.push_back(entry.path());
    for (const fs::path& p : entries) {
        const StepDirName n = step_dir_name(p);
        if (n.step < 0 || is_resume_source(p)) continue;
        const fs::path named = fs::path(dir) / step_name(n.step);
        if (n.suffix == kReplacedSuffix || !has_manifest(p)) remove_step_dir(p);  // a killed switch's, save's, prune's
        else if (n.suffix == kStagingSuffix) settle_staging(p, named);
    }
    remove_stray_temporaries(dir);
    for (const auto& [step, p] : complete_steps(dir)) remove_stray_temporaries(p);
    sync_directory(dir);
}

}  // namespace nb

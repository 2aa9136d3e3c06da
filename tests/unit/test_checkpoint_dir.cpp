// A checkpoint directory (src/core/checkpoint_dir.h): it exists exactly when its manifest does, the newest
// complete one is found, every file is checked for size and sha256 before anything is returned (the error
// names the file and the field), and --save-keep removes only what a newer complete checkpoint replaces.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "src/core/atomic_file.h"
#include "src/core/checkpoint_dir.h"
#include "src/core/error.h"
#include "tests/unit/test_util.h"

namespace nb {

namespace {

using test::runtime_error;

// Step `step` with two stage files and a run field.
std::string save(const std::string& dir, int64_t step, bool complete = true) {
    const std::string step_dir = make_step_dir(dir, step);
    std::vector<CheckpointEntry> entries;
    entries.push_back(write_checkpoint_file(step_dir, "stage_0.bin", "weights of stage 0 at " + std::to_string(step)));
    entries.push_back(write_checkpoint_file(step_dir, "stage_1.bin", std::string(1000, 'w')));
    if (complete) write_manifest(step_dir, step, entries, R"({"schedule": "2bw", "stages": 2})");
    return step_dir;
}

}  // namespace

TEST_CASE("checkpoint dir: write, find the newest complete one, read it back checked") {
    test::TempDir dir;
    save(dir.path, 2);
    save(dir.path, 10);
    save(dir.path, 12, false);  // no manifest: it does not exist
    const std::string found = find_checkpoint(dir.path);
    CHECK(found == dir.file("step_10"));
    CHECK(find_checkpoint(dir.file("step_2")) == dir.file("step_2"));  // --load DIR/step_N: that one
    const LoadedCheckpoint c = read_checkpoint(found);
    CHECK(c.step == 10);
    CHECK(c.files.at("stage_0.bin") == "weights of stage 0 at 10");
    CHECK(c.files.at("stage_1.bin") == std::string(1000, 'w'));
    const auto& run = c.run.object("m", "run");
    CHECK(json_field(run, "schedule", "m").string("m", "schedule") == "2bw");
    CHECK(runtime_error([&] { find_checkpoint(dir.file("step_12")); }).find("no complete checkpoint") !=
          std::string::npos);
    test::TempDir empty;
    CHECK(runtime_error([&] { find_checkpoint(empty.path); }) ==
          "--load '" + empty.path + "': no complete checkpoint there (a step_<t> directory with a manifest.json)");
}

TEST_CASE("checkpoint dir: a truncated or damaged file, or a damaged manifest, is an error naming it") {
    test::TempDir dir;
    const std::string step_dir = save(dir.path, 4);
    const std::string stage1 = step_dir + "/stage_1.bin";
    write_file_atomically(stage1, std::string(999, 'w'));
    CHECK(runtime_error([&] { read_checkpoint(step_dir); }) ==
          "'" + stage1 + "': 999 bytes, the manifest's field 'bytes' says 1000 (truncated?)");
    write_file_atomically(stage1, std::string(999, 'w') + "x");
    CHECK(runtime_error([&] { read_checkpoint(step_dir); }) ==
          "'" + stage1 + "': its sha256 differs from the manifest's field 'sha256' (damaged)");
    std::filesystem::remove(stage1);
    CHECK(runtime_error([&] { read_checkpoint(step_dir); }).find("cannot open '" + stage1 + "'") == 0);
    const std::string manifest = step_dir + "/manifest.json";
    write_file_atomically(manifest, R"({"format": 2, "step": 4, "files": [], "run": {}})");
    CHECK(runtime_error([&] { read_checkpoint(step_dir); }) ==
          "'" + manifest + "': field 'format' is 2, this nobubble reads format 1");
    write_file_atomically(manifest, R"({"format": 1, "step": 4, "files": [{"name": "../x", "bytes": 1, "sha256": ""}],
                                        "run": {}})");
    CHECK(runtime_error([&] { read_checkpoint(step_dir); }) ==
          "'" + manifest + "': field 'name' is '../x', not a file of the checkpoint");
    write_file_atomically(manifest, "{\"format\": 1, \"st");
    CHECK(runtime_error([&] { read_checkpoint(step_dir); }).find("'" + manifest + "': JSON ends inside a string") == 0);
    CHECK_THROWS_AS(write_manifest(step_dir, 4, {}, "{not json"), RuntimeError);  // never writes what it cannot read
}

TEST_CASE("checkpoint dir: --save-keep removes only checkpoints a newer complete one replaces") {
    test::TempDir dir;
    for (int64_t step : {1, 2, 3, 4}) save(dir.path, step);
    save(dir.path, 5, false);  // being written: it does not count, and is not removed
    prune_checkpoints(dir.path, 2);
    CHECK_FALSE(std::filesystem::exists(dir.file("step_1")));
    CHECK_FALSE(std::filesystem::exists(dir.file("step_2")));
    CHECK(std::filesystem::exists(dir.file("step_3/manifest.json")));
    CHECK(std::filesystem::exists(dir.file("step_4/manifest.json")));
    CHECK(std::filesystem::exists(dir.file("step_5/stage_0.bin")));
    prune_checkpoints(dir.path, 5);  // fewer than K: nothing goes
    CHECK(std::filesystem::exists(dir.file("step_3/manifest.json")));
}

}  // namespace nb

namespace nb {

TEST_CASE("checkpoint dir: a file given as pieces is written and recorded as their concatenation") {
    test::TempDir dir;
    const std::string step_dir = make_step_dir(dir.path, 1);
    const std::string a = "header", b(100000, 'x'), c = "tail";
    const CheckpointEntry pieces = write_checkpoint_file(step_dir, "stage_0.bin", std::vector<std::string_view>{a, b, "", c});
    const CheckpointEntry whole = write_checkpoint_file(step_dir, "stage_1.bin", a + b + c);
    CHECK(pieces.bytes == whole.bytes);
    CHECK(pieces.sha256 == whole.sha256);
    CHECK(read_whole_file(step_dir + "/stage_0.bin") == a + b + c);
}

}  // namespace nb

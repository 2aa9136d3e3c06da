// A checkpoint directory (src/core/checkpoint_dir.h): it exists exactly when its manifest does, the newest
// complete one is found, every file is checked for size and sha256 before anything is returned (the error
// names the file and the field), and --save-keep removes only what a newer complete checkpoint replaces.
#include <doctest/doctest.h>

#include <algorithm>
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

// Step `step` with two stage files and a run field: its step directory, or its staging one when not complete.
std::string save(const std::string& dir, int64_t step, bool complete = true, const SaveStepHook& at = {}) {
    const std::string staging = make_staging_dir(dir, step);
    std::vector<CheckpointEntry> entries;
    entries.push_back(
        write_checkpoint_file(staging, "stage_0.safetensors", "weights of stage 0 at " + std::to_string(step)));
    entries.push_back(write_checkpoint_file(staging, "stage_1.safetensors", std::string(1000, 'w')));
    if (!complete) return staging;
    return write_manifest(staging, step, entries, R"({"schedule": "2bw", "stages": 2})", at);
}

// A resharded save of `step` (three stage files), completed or stopped where `at` throws.
void resave(const std::string& dir, int64_t step, const SaveStepHook& at = {}) {
    const std::string staging = make_staging_dir(dir, step);
    std::vector<CheckpointEntry> entries;
    for (int s = 0; s < 3; ++s)
        entries.push_back(write_checkpoint_file(staging, stage_file_name(s), "resharded stage " + std::to_string(s)));
    write_manifest(staging, step, entries, R"({"schedule": "2bw", "stages": 3})", at);
}

// A hook that stops the save at `point`, as a kill there would (nothing after it runs).
struct Killed {};
SaveStepHook kill_at(SaveStep point) {
    return [point](SaveStep at, const std::string&) {
        if (at == point) throw Killed{};
    };
}

// The entries of `dir`, sorted, as "name name ...".
std::string listing(const std::string& dir) {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(dir)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    std::string out;
    for (const std::string& n : names) out += (out.empty() ? "" : " ") + n;
    return out;
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
    CHECK(c.files.at("stage_0.safetensors") == "weights of stage 0 at 10");
    CHECK(c.files.at("stage_1.safetensors") == std::string(1000, 'w'));
    CHECK(json_string(json_at(c.run, "schedule", "m"), "m", "schedule") == "2bw");
    CHECK(runtime_error([&] { find_checkpoint(dir.file("step_12")); }).find("no complete checkpoint") !=
          std::string::npos);
    test::TempDir empty;
    CHECK(runtime_error([&] { find_checkpoint(empty.path); }) ==
          "--load '" + empty.path + "': no complete checkpoint there (a step_<t> directory with a manifest.json)");
}

TEST_CASE("checkpoint dir: a truncated or damaged file, or a damaged manifest, is an error naming it") {
    test::TempDir dir;
    const std::string step_dir = save(dir.path, 4);
    const std::string stage1 = step_dir + "/stage_1.safetensors";
    write_file_atomically(stage1, std::string(999, 'w'));
    CHECK(runtime_error([&] { read_checkpoint(step_dir); }) ==
          "'" + stage1 + "': 999 bytes, the manifest's field 'bytes' says 1000 (truncated?)");
    write_file_atomically(stage1, std::string(999, 'w') + "x");
    CHECK(runtime_error([&] { read_checkpoint(step_dir); }) ==
          "'" + stage1 + "': its sha256 differs from the manifest's field 'sha256' (damaged)");
    std::filesystem::remove(stage1);
    CHECK(runtime_error([&] { read_checkpoint(step_dir); }).find("cannot open '" + stage1 + "'") == 0);
    const std::string manifest = step_dir + "/manifest.json";
    write_file_atomically(manifest, R"({"format": 3, "step": 4, "files": [], "run": {}})");
    CHECK(runtime_error([&] { read_checkpoint(step_dir); }) ==
          "'" + manifest + "': field 'format' is 3, this nobubble reads formats 1 to 2");
    write_file_atomically(manifest, R"({"format": 1, "step": 4, "files": [{"name": "../x", "bytes": 1, "sha256": ""}],
                                        "run": {}})");
    CHECK(runtime_error([&] { read_checkpoint(step_dir); }) ==
          "'" + manifest + "': field 'name' is '../x', not a file of the checkpoint");
    write_file_atomically(manifest, "{\"format\": 1, \"st");
    CHECK(runtime_error([&] { read_checkpoint(step_dir); }).find("'" + manifest + "': JSON parse error") == 0);
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
    CHECK(std::filesystem::exists(dir.file("step_5.saving/stage_0.safetensors")));
    prune_checkpoints(dir.path, 5);  // fewer than K: nothing goes
    CHECK(std::filesystem::exists(dir.file("step_3/manifest.json")));
}

}  // namespace nb

namespace nb {

TEST_CASE("checkpoint dir: a file given as pieces is written and recorded as their concatenation") {
    test::TempDir dir;
    const std::string step_dir = make_staging_dir(dir.path, 1);
    const std::string a = "header", b(100000, 'x'), c = "tail";
    const CheckpointEntry pieces =
        write_checkpoint_file(step_dir, "stage_0.safetensors", std::vector<std::string_view>{a, b, "", c});
    const CheckpointEntry whole = write_checkpoint_file(step_dir, "stage_1.safetensors", a + b + c);
    CHECK(pieces.bytes == whole.bytes);
    CHECK(pieces.sha256 == whole.sha256);
    CHECK(read_whole_file(step_dir + "/stage_0.safetensors") == a + b + c);
}

}  // namespace nb

namespace nb {

// Issue 37, defect 3: a resumed (here: resharded, 3 stages where 2 saved) run saves step 4 again into a --save
// DIR that holds a complete step_4, and is killed after its first stage file is written, before its manifest.
// The complete step_4 must still load, whole, as it was.
TEST_CASE("checkpoint dir: a re-save of an existing step killed before its manifest leaves the old one whole") {
    test::TempDir dir;
    save(dir.path, 2);
    save(dir.path, 4);
    const std::string resave = make_staging_dir(dir.path, 4);
    write_checkpoint_file(resave, "stage_0.safetensors", "the resharded stage 0 at 4, longer than the saved one");
    // killed here: no other stage file, no manifest
    const LoadedCheckpoint c = read_checkpoint(find_checkpoint(dir.path));
    CHECK(c.step == 4);
    CHECK(c.files.at("stage_0.safetensors") == "weights of stage 0 at 4");
    CHECK(c.files.at("stage_1.safetensors") == std::string(1000, 'w'));
}

}  // namespace nb

namespace nb {

TEST_CASE("checkpoint dir: a re-save replaces the step whole, and leaves nothing beside it") {
    test::TempDir dir;
    save(dir.path, 4);
    resave(dir.path, 4);
    const LoadedCheckpoint c = read_checkpoint(find_checkpoint(dir.path));
    CHECK(c.step_dir == dir.file("step_4"));
    CHECK(c.files.size() == 3);
    CHECK(c.files.at("stage_2.safetensors") == "resharded stage 2");
    CHECK(listing(dir.path) == "step_4");
    CHECK(listing(dir.file("step_4")) == "manifest.json stage_0.safetensors stage_1.safetensors stage_2.safetensors");
}

TEST_CASE("checkpoint dir: every kill point of a re-save leaves a complete checkpoint of the step") {
    for (const SaveStep point : {SaveStep::manifest, SaveStep::switch_names}) {
        test::TempDir dir;
        save(dir.path, 2);
        save(dir.path, 4);
        CHECK_THROWS_AS(resave(dir.path, 4, kill_at(point)), Killed);
        const LoadedCheckpoint c = read_checkpoint(find_checkpoint(dir.path));
        CHECK(c.step == 4);
        // Before the manifest: the old one; between the renames: the new one, complete in its staging folder.
        CHECK(c.files.size() == (point == SaveStep::manifest ? 2 : 3));
        CHECK(find_checkpoint(dir.file("step_4")) == c.step_dir);  // --load DIR/step_4 finds it too
        // The next run's clean-up: step_4 complete under its own name, nothing else of the killed save.
        remove_stale_saves(dir.path, "");
        CHECK(listing(dir.path) == "step_2 step_4");
        CHECK(read_checkpoint(find_checkpoint(dir.path)).files.size() == c.files.size());
    }
}

TEST_CASE("checkpoint dir: a prune killed halfway leaves the newest checkpoints; the clean-up removes the rest") {
    test::TempDir dir;
    save(dir.path, 2);
    save(dir.path, 4);
    save(dir.path, 6);
    CHECK_THROWS_AS(prune_checkpoints(dir.path, 2, kill_at(SaveStep::prune)), Killed);
    CHECK(listing(dir.path) == "step_2 step_4 step_6");
    CHECK_FALSE(std::filesystem::exists(dir.file("step_2/manifest.json")));
    CHECK(find_checkpoint(dir.path) == dir.file("step_6"));
    remove_stale_saves(dir.path, "");
    CHECK(listing(dir.path) == "step_4 step_6");
}

TEST_CASE("checkpoint dir: the clean-up removes what killed saves left, and never the checkpoint being resumed") {
    test::TempDir dir;
    save(dir.path, 2);
    write_file_atomically(dir.file("step_2/stage_0.safetensors.tmp.4242"), "half");  // a killed write (older nobubble)
    write_file_atomically(dir.file("stray.tmp.17"), "half");
    write_file_atomically(dir.file("notes.tmp.txt"), "not ours");            // no pid: not a temporary of ours
    save(dir.path, 4, false);                                                 // a killed save: no manifest
    // A save of step 6 killed between its renames, with no earlier step_6: its complete staging folder.
    CHECK_THROWS_AS(save(dir.path, 6, true, kill_at(SaveStep::switch_names)), Killed);
    // And one of step 8 that the run resumes from: it stays where the ranks found it.
    CHECK_THROWS_AS(save(dir.path, 8, true, kill_at(SaveStep::switch_names)), Killed);
    const std::string resuming_from = find_checkpoint(dir.path);
    CHECK(resuming_from == dir.file("step_8.saving"));
    remove_stale_saves(dir.path, resuming_from);
    CHECK(listing(dir.path) == "notes.tmp.txt step_2 step_6 step_8.saving");
    CHECK(listing(dir.file("step_2")) == "manifest.json stage_0.safetensors stage_1.safetensors");
    CHECK(read_checkpoint(dir.file("step_6")).step == 6);
    CHECK(read_checkpoint(resuming_from).step == 8);
    // At the run's first save (no rank reads it any more) step 8's staging folder takes its name; a save being
    // written (no manifest) is left alone.
    save(dir.path, 10, false);
    settle_complete_staging(dir.path);
    CHECK(listing(dir.path) == "notes.tmp.txt step_10.saving step_2 step_6 step_8");
    CHECK(read_checkpoint(dir.file("step_8")).step == 8);
}

}  // namespace nb

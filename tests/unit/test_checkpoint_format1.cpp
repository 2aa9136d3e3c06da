// Checkpoints written before the stage files became safetensors (manifest "format": 1, stage_<s>.bin in NBSTATE1,
// src/core/tensor_file.h) still load: a real 2-stage checkpoint, rewritten in format 1, restores the same tensors
// as the format-2 original, on 2 stages and resharded onto 1; a format this nobubble does not know is one error.
#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <string>

#include "pipeline/stage/stage_checkpoint.h"
#include "src/core/atomic_file.h"
#include "src/core/error.h"
#include "src/core/sha256.h"
#include "src/core/tensor_file.h"
#include "src/run/checkpoint.h"
#include "tests/unit/saved_checkpoint.h"
#include "tests/unit/test_util.h"

namespace nb {

namespace {

// `step_dir` rewritten as format 1 into `old_dir`: each stage file as NBSTATE1 under its .bin name, the manifest
// saying so. The manifest's fields, dumped by nlohmann/json.
Json write_format1_copy(const std::string& step_dir, const std::string& old_dir) {
    std::filesystem::create_directories(old_dir);
    Json manifest = read_json(read_whole_file(step_dir + "/manifest.json"), "manifest");
    manifest["format"] = 1;
    int stage = 0;
    for (Json& file : manifest["files"]) {
        const std::string name = file["name"].get<std::string>();
        REQUIRE(name == stage_file_name(stage));
        const std::vector<NamedTensor> tensors = decode_stage_file(read_whole_file(step_dir + "/" + name), name);
        std::vector<std::pair<std::string, const Tensor*>> refs;
        for (const NamedTensor& t : tensors) refs.emplace_back(t.name, &t.tensor);
        const std::string bytes = encode_named_tensors(refs);
        file["name"] = stage_file_name(stage, 1);
        file["bytes"] = bytes.size();
        file["sha256"] = Sha256::hex_of(bytes.data(), bytes.size());
        write_file_atomically(old_dir + "/" + stage_file_name(stage, 1), bytes);
        ++stage;
    }
    write_file_atomically(old_dir + "/manifest.json", manifest.dump(2));
    return manifest;
}

// Every stage of a `stages`-stage resume of `o` from `load_path`: its tensors by name, copied.
std::map<std::string, std::string> restored_bytes(TrainOptions o, int stages, const std::string& load_path) {
    o.save_dir.clear();
    o.save_interval = 0;
    o.stages = stages;
    o.load_path = load_path;
    const RunPlan plan = make_run_plan(o);
    const ResumePoint resume = read_resume_point(o, plan.cut);
    std::map<std::string, std::string> out;
    for (const StageSpec& spec : plan.cut) {
        const StageFiles files = read_stage_files(resume, spec);
        for (const auto& [name, tensor] : files.by_name)
            out[name] = std::string(static_cast<const char*>(tensor->data()), tensor->bytes());
    }
    return out;
}

}  // namespace

TEST_CASE("checkpoint format 1: stage_<s>.bin (NBSTATE1) loads as its safetensors original does, resharded too") {
    test::TempDir dir;
    const TrainOptions o = test::run_saving_checkpoints(dir, "1f1b", 2);
    const std::string step_dir = dir.file("ck/step_2"), old_dir = dir.file("old/step_2");
    Json manifest = write_format1_copy(step_dir, old_dir);

    for (const int stages : {2, 1}) {
        CAPTURE(stages);
        const auto current = restored_bytes(o, stages, step_dir);
        CHECK(current.size() > 10);
        CHECK(restored_bytes(o, stages, old_dir) == current);
    }

    manifest["format"] = 3;
    write_file_atomically(old_dir + "/manifest.json", manifest.dump(2));
    CHECK(test::runtime_error([&] { restored_bytes(o, 2, old_dir); }) ==
          "'" + old_dir + "/manifest.json': field 'format' is 3, this nobubble reads formats 1 to 2");
}

}  // namespace nb

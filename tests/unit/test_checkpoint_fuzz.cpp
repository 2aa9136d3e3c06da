// The checkpoint reader against random damage (issue 11, item 7): a real pipeline checkpoint (2bw on 2 stages,
// so it holds weight versions) whose manifest gets bit flips, truncations, random bytes and random edits of
// its numbers, read the way a resume reads it (read_resume_point, each stage's files for a 3-stage run, restore):
// never a crash or another kind of exception, and every error names the checkpoint's directory.
#include <doctest/doctest.h>

#include <random>
#include <string>

#include "pipeline/stage/stage_checkpoint.h"
#include "src/core/atomic_file.h"
#include "src/core/error.h"
#include "src/run/checkpoint.h"
#include "tests/unit/saved_checkpoint.h"
#include "tests/unit/test_util.h"

namespace nb {

namespace {

// One damaged manifest: what a random flip, cut, insertion or number edit makes of `good`.
std::string damage(const std::string& good, std::mt19937_64& rng, int kind) {
    std::string text = good;
    switch (kind % 6) {
        case 0:
            for (int k = 0; k <= static_cast<int>(rng() % 3); ++k) text[rng() % text.size()] ^= static_cast<char>(1 << (rng() % 8));
            break;
        case 1: text.resize(rng() % text.size()); break;
        case 2: text.insert(rng() % text.size(), std::string(1 + rng() % 4, "0123456789-\",{}[]"[rng() % 17])); break;
        case 3: {  // a digit changed: the JSON stays valid, a field's value does not
            size_t at = rng() % text.size();
            while (at < text.size() && (text[at] < '0' || text[at] > '9')) ++at;
            if (at < text.size()) text[at] = static_cast<char>('0' + rng() % 10);
            break;
        }
        case 4: {  // a whole number replaced by one that breaks a rule (a count, an index, a size)
            static const char* kNumbers[] = {"-1", "0", "1", "2", "3", "7", "99999999999", "9223372036854775807"};
            size_t at = rng() % text.size();
            while (at < text.size() && (text[at] < '0' || text[at] > '9')) ++at;
            size_t end = at;
            while (end < text.size() && text[end] >= '0' && text[end] <= '9') ++end;
            if (at < text.size()) text.replace(at, end - at, kNumbers[rng() % 8]);
            break;
        }
        default: {  // an element of a list dropped, or the last one repeated (stages, cut, steps, files)
            const size_t comma = text.find(", ", rng() % text.size());
            const size_t close = comma == std::string::npos ? comma : text.find_first_of("]}", comma);
            if (close == std::string::npos) break;
            if (rng() % 2) text.erase(comma, close - comma);
            else text.insert(close, text.substr(comma, close - comma));
        }
    }
    return text;
}

}  // namespace

TEST_CASE("checkpoint reader: random damage to a manifest is an error naming the checkpoint, never a crash (2000 cases)") {
    test::TempDir dir;
    const TrainOptions o = test::run_saving_checkpoints(dir, "2bw", 3);
    const std::string step_dir = dir.file("ck/step_2"), manifest = step_dir + "/manifest.json";
    const std::string good = read_whole_file(manifest);

    TrainOptions resumed = o;
    resumed.save_dir.clear();
    resumed.save_interval = 0;
    resumed.stages = 3;
    resumed.load_path = step_dir;
    const RunPlan plan = make_run_plan(resumed);
    std::mt19937_64 rng(11);
    int errors = 0, loaded = 0;
    for (int c = 0; c < 2000; ++c) {
        write_file_atomically(manifest, damage(good, rng, c));
        try {
            const ResumePoint resume = read_resume_point(resumed, plan.cut);
            for (const StageSpec& spec : plan.cut) {
                StageState stage(resumed, spec, Device::cpu);
                const StageFiles files = read_stage_files(resume, spec);
                restore_stage_state(stage, files.by_name, files.steps_taken, files.source);
                saved_versions(files.by_name, stage.model.layout(), DType::f32, Device::cpu, files.source);
            }
            ++loaded;
        } catch (const RuntimeError& e) {
            const std::string what = e.what();
            CHECK_MESSAGE(what.find(dir.file("ck")) != std::string::npos, what);
            ++errors;
        }
    }
    CHECK(errors > 1500);  // most damage is caught; what loads changed a field nobody reads (e.g. "program")
    CHECK(errors + loaded == 2000);
}

}  // namespace nb

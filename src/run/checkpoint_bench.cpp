#include "src/run/checkpoint_bench.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "pipeline/stage/stage_checkpoint.h"
#include "src/core/atomic_file.h"
#include "src/core/error.h"
#include "src/core/sha256.h"
#include "src/run/checkpoint.h"

namespace nb {

namespace fs = std::filesystem;

namespace {

// The options of a one-stage run that saves to `save_dir` and, when given, resumes from `load_path`. Nothing
// reads the data, so the checkpoint records no data files (the plan wants a --data; the save does not).
RunPlan bench_plan(const ModelConfig& model, Device device, const std::string& save_dir, const std::string& load_path) {
    TrainOptions o;
    o.model = model;
    o.device = device;
    o.data_path = "bench-checkpoint-reads-no-data";
    o.lr.lr = 1e-3;
    o.save_dir = save_dir;
    o.save_interval = 1;
    o.load_path = load_path;
    RunPlan plan = make_run_plan(o);
    plan.options.data_path.clear();
    return plan;
}

// Progress lines of save and load, not wanted here.
struct NullSink {
    std::FILE* f = std::fopen("/dev/null", "w");
    ~NullSink() {
        if (f) std::fclose(f);
    }
};

}  // namespace

CheckpointTiming time_checkpoint(Ops& ops, const ModelConfig& model, const std::string& dir, int reps) {
    const RunPlan save_plan = bench_plan(model, ops.device(), dir, "");
    StageState stage(save_plan.options, whole_model_spec(model), ops.device());
    const NullSink sink;
    constexpr double kNever = std::numeric_limits<double>::infinity();
    CheckpointTiming t{stage.model.layout().total_numel(), 0, kNever, kNever, kNever, kNever, kNever};
    for (int r = 1; r <= reps; ++r) {
        t.save_s =
            std::min(t.save_s, seconds_of([&] { save_one_stage(save_plan.options, r, 0.0, stage, {}, sink.f); }));
        const std::string step_dir = (fs::path(dir) / fmt::format("step_{}", r)).string();
        for (const auto& entry : fs::directory_iterator(step_dir)) drop_from_page_cache(entry.path().string());
        t.file_bytes = static_cast<int64_t>(fs::file_size(fs::path(step_dir) / stage_file_name(0)));
        const RunPlan load_plan = bench_plan(model, ops.device(), dir, step_dir);
        t.load_s = std::min(t.load_s, seconds_of([&] { load_one_stage(load_plan.options, stage, sink.f); }));
        fs::remove_all(step_dir);

        const auto t0 = std::chrono::steady_clock::now();
        const SafetensorsPieces file = stage_state_pieces(stage);
        t.encode_s = std::min(t.encode_s, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        t.sha256_s = std::min(t.sha256_s, seconds_of([&] { Sha256::hex_of(file.pieces()); }));
        const std::string plain = (fs::path(dir) / "plain_write.bin").string();
        t.disk_write_s = std::min(t.disk_write_s, time_plain_write_s(plain, file.pieces()));
    }
    return t;
}

// Its pages are clean after the fsync, so the kernel drops them: the next read comes from the disk, as a resume
// after a crash or on another node would.
void drop_from_page_cache(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
}

// The disk's sequential write rate's measure: the file's bytes to a new file with plain write() calls, then one
// fsync.
double time_plain_write_s(const std::string& path, const std::vector<std::string_view>& pieces) {
    double seconds = 0;
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) throw RuntimeError(fmt::format("cannot create '{}': {}", path, std::strerror(errno)));
    seconds = seconds_of([&] {
        for (const std::string_view piece : pieces) write_all(fd, piece, path);
        if (::fsync(fd) != 0) throw RuntimeError(fmt::format("cannot fsync '{}': {}", path, std::strerror(errno)));
    });
    ::close(fd);
    ::unlink(path.c_str());
    return seconds;
}

ScratchDir::ScratchDir(const std::string& parent) {
    std::string pattern = (fs::path(parent) / "nobubble_bench_checkpoint_XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr)
        throw RuntimeError(fmt::format("--dir '{}': cannot make a directory there: {}", parent, std::strerror(errno)));
    path_ = pattern;
}

ScratchDir::~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
}

}  // namespace nb

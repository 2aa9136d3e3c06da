// `nobubble bench checkpoint`: the save and load time of one stage's checkpoint of the whole model with AdamW
// state, for `small` and `smollm-135m`, on the CPU (and on CUDA where a GPU is usable), the bytes written, and
// the save's rate against this disk's sequential write rate measured in the same run (src/run/checkpoint_bench.h).
//   Target (issue 11): the save writes at >= 50% of the disk's rate.
// Then the Hugging Face folder of each model (src/run/hf_bench.h): `nobubble export`'s write and `--init-from-hf`'s
// read against the disk's sequential write and read rates in the same run. Target (issue 38): >= 50% of each.
#include <algorithm>
#include <cstdlib>

#include <fmt/format.h>

#include "src/cli/commands.h"
#include "src/core/byte_size.h"
#include "src/core/error.h"
#include "src/run/backend.h"
#include "src/run/checkpoint_bench.h"
#include "src/run/hf_bench.h"

namespace nb::cli {

namespace {

struct BenchCheckpointFlags {
    std::string dir;  // where the scratch directory goes; empty: $TMPDIR, else /tmp
    std::vector<std::string> models = {"small", "smollm-135m"};
    int reps = 3;
    double target = 0.50;
};

std::string scratch_parent(const BenchCheckpointFlags& f) {
    if (!f.dir.empty()) return f.dir;
    const char* tmp = std::getenv("TMPDIR");
    return tmp && *tmp ? tmp : "/tmp";
}

std::string rate(int64_t bytes, double seconds) {
    return format_bytes(static_cast<int64_t>(static_cast<double>(bytes) / seconds)) + "/s";
}

// One row per model on `ops`' device; the save's share of the disk's rate of each.
std::vector<double> time_device(Ops& ops, const BenchCheckpointFlags& f, const std::string& dir) {
    std::vector<double> ratios;
    for (const std::string& name : f.models) {
        const CheckpointTiming t = time_checkpoint(ops, model_preset(name), dir, f.reps);
        const double ratio = t.disk_write_s / t.save_s;  // same bytes: the rates' ratio is the times' inverse
        ratios.push_back(ratio);
        fmt::print("  {:<6} {:<12} {:>12} {:>9} {:>8.3f} {:>8.3f} {:>11} {:>11} {:>6.0f}%   encode {:.3f} s, "
                   "sha256 {:.3f} s ({})\n",
                   device_name(ops.device()), name, t.parameters, format_bytes(t.file_bytes), t.save_s, t.load_s,
                   rate(t.file_bytes, t.save_s), rate(t.file_bytes, t.disk_write_s), 100 * ratio, t.encode_s,
                   t.sha256_s, rate(t.file_bytes, t.sha256_s));
    }
    return ratios;
}

// One row per model: export against the disk's write rate, import against its read rate; the lower ratio.
double time_hf_folders(const BenchCheckpointFlags& f, const std::string& dir) {
    fmt::print("Hugging Face folder of the whole model in float32 (export: write_hf_folder, every file fsynced, "
               "renamed into place;\nimport: read_hf_folder from the disk, dropped from the page cache first, into "
               "f32 tensors by our names); best of {} each:\n", f.reps);
    fmt::print("  {:<12} {:>9} {:>8} {:>8} {:>11} {:>11} {:>6} {:>11} {:>11} {:>6}\n", "model", "bytes", "export s",
               "import s", "export rate", "disk write", "ratio", "import rate", "disk read", "ratio");
    double worst = 1e9;
    for (const std::string& name : f.models) {
        const HfTiming t = time_hf_folder(model_preset(name), dir, f.reps);
        const double write_ratio = t.disk_write_s / t.export_s, read_ratio = t.disk_read_s / t.import_s;
        worst = std::min({worst, write_ratio, read_ratio});
        fmt::print("  {:<12} {:>9} {:>8.3f} {:>8.3f} {:>11} {:>11} {:>5.0f}% {:>11} {:>11} {:>5.0f}%\n", name,
                   format_bytes(t.file_bytes), t.export_s, t.import_s, rate(t.file_bytes, t.export_s),
                   rate(t.file_bytes, t.disk_write_s), 100 * write_ratio, rate(t.file_bytes, t.import_s),
                   rate(t.file_bytes, t.disk_read_s), 100 * read_ratio);
    }
    return worst;
}

int run_bench_checkpoint(const BenchCheckpointFlags& f) {
    const ScratchDir scratch(scratch_parent(f));
    fmt::print("checkpoint of one stage holding the whole model with AdamW state (weights, exp_avg, exp_avg_sq), "
               "saved and loaded by the\nsingle-process loop's code in {} (removed afterwards); best of {} each:\n"
               "  save = encode + write, fsync, rename, directory fsync + sha256 + manifest; load = read from the "
               "disk (dropped from the\n  page cache first) + size and sha256 checks + decode + restore; disk = the "
               "same bytes by plain write() + fsync there\n", scratch.path(), f.reps);
    fmt::print("  {:<6} {:<12} {:>12} {:>9} {:>8} {:>8} {:>11} {:>11} {:>7}   save's parts alone\n", "device",
               "model", "params", "bytes", "save s", "load s", "save rate", "disk rate", "ratio");
    std::unique_ptr<Ops> cpu = make_ops(Device::cpu);
    std::vector<double> ratios = time_device(*cpu, f, scratch.path());
    std::unique_ptr<Ops> gpu;
    try {
        gpu = make_ops(Device::cuda);
    } catch (const RuntimeError& e) {  // no usable GPU, or no CUDA in this build
        fmt::print("  cuda: skipped ({})\n", e.what());
    }
    if (gpu)
        for (const double r : time_device(*gpu, f, scratch.path())) ratios.push_back(r);
    const double worst = *std::min_element(ratios.begin(), ratios.end());
    fmt::print("target: save rate >= {:.0f}% of the disk's sequential write rate: lowest {:.0f}%, target {}\n",
               100 * f.target, 100 * worst, worst >= f.target ? "met" : "not met");
    const double hf_worst = time_hf_folders(f, scratch.path());
    fmt::print("target: export and import rates >= {:.0f}% of the disk's sequential write and read rates: lowest "
               "{:.0f}%, target {}\n", 100 * f.target, 100 * hf_worst, hf_worst >= f.target ? "met" : "not met");
    return 0;
}

}  // namespace

Command add_bench_checkpoint_command(CLI::App& bench) {
    auto* sub = bench.add_subcommand("checkpoint", "Checkpoint save and load time and rate against the disk's");
    auto flags = std::make_shared<BenchCheckpointFlags>();
    sub->add_option("--dir", flags->dir, "Where to write (a fresh directory in it, removed afterwards; default "
                                         "$TMPDIR or /tmp)");
    sub->add_option("--models", flags->models, "Presets to time")->capture_default_str();
    sub->add_option("--reps", flags->reps, "Repetitions (the best is kept)")
        ->capture_default_str()
        ->check(CLI::Range(1, 100));
    return {sub, [flags] { return run_bench_checkpoint(*flags); }};
}

}  // namespace nb::cli

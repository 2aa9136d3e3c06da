// Timing a checkpoint's save and load, for `nobubble bench checkpoint`: one stage holding the whole model with
// AdamW state, through the single-process loop's own code (src/run/checkpoint.h: encode_stage_state,
// write_checkpoint_file, write_manifest; find_checkpoint, read_checkpoint, restore_stage_state), and beside it
// this disk's sequential write rate: the same number of bytes written with plain write() calls and one fsync
// into the same directory, in the same repetition (so that both see the same load on a shared machine).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "model/config.h"
#include "src/ops/ops.h"

namespace nb {

struct CheckpointTiming {
    int64_t parameters = 0;
    int64_t file_bytes = 0;     // the stage file (the manifest beside it is about 2 kB)
    double save_s = 0;          // save_one_stage (src/run/checkpoint.h): encode, write + fsync + rename + directory fsync, sha256, manifest
    double load_s = 0;          // load_one_stage from the disk (the files dropped from the page cache first):
                                // read, size and sha256 check, decode, identity check, restore
    double disk_write_s = 0;    // the same bytes, plain write() + fsync, nothing else
    double encode_s = 0;        // save's parts timed alone: stage_state_pieces (headers; device tensors to the host)
    double sha256_s = 0;        // and the sha256 of the file's bytes
};

// `reps` repetitions in the existing directory `dir` (each removes what it wrote); each figure the best of them.
// The stage lives on `ops`' device.
CheckpointTiming time_checkpoint(Ops& ops, const ModelConfig& model, const std::string& dir, int reps);

// The seconds `body()` takes (steady clock).
template <class F>
double seconds_of(F&& body) {
    const auto t0 = std::chrono::steady_clock::now();
    body();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The file's pages out of the page cache (they are clean once fsynced), so that the next read comes from the disk.
void drop_from_page_cache(const std::string& path);

// The disk's sequential write rate's measure: `pieces` to a new file at `path` by plain write() calls, then one
// fsync; the seconds (the file is removed).
double time_plain_write_s(const std::string& path, const std::vector<std::string_view>& pieces);

// A fresh directory under `parent` (nobubble_bench_checkpoint_XXXXXX), removed with everything in it when this
// goes. nb::RuntimeError naming `parent` when it cannot be made.
class ScratchDir {
public:
    explicit ScratchDir(const std::string& parent);
    ~ScratchDir();
    ScratchDir(const ScratchDir&) = delete;
    ScratchDir& operator=(const ScratchDir&) = delete;
    const std::string& path() const { return path_; }

private:
    std::string path_;
};

}  // namespace nb

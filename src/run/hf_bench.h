// Timing `nobubble export` and `--init-from-hf`'s read for `nobubble bench checkpoint` (src/run/hf_folder.h): the
// whole model's weights (f32, as --seed initialises them) written as a Hugging Face folder and read back, beside
// this disk's sequential write and read rates for the same bytes in the same directory and repetition.
#pragma once

#include <cstdint>
#include <string>

#include "model/config.h"

namespace nb {

struct HfTiming {
    int64_t file_bytes = 0;   // model.safetensors
    double export_s = 0;      // write_hf_folder: the tensors' HF names, safetensors header, write + fsync of every
                              // file (config.json, generation_config.json), rename, directory fsync
    double import_s = 0;      // read_hf_folder from the disk (dropped from the page cache first): config.json, read,
                              // header checks, tensors by our names in f32, the shapes against config.json
    double disk_write_s = 0;  // the same bytes by plain write() + fsync
    double disk_read_s = 0;   // the export's file read back by plain read() (dropped from the page cache first)
};

// `reps` repetitions in the existing directory `dir` (each removes what it wrote); each figure the best of them.
HfTiming time_hf_folder(const ModelConfig& model, const std::string& dir, int reps);

}  // namespace nb

// A checkpoint's model, for `nobubble export` and `nobubble eval --load` (docs/formats.md, "Hugging Face
// folders"): its shape (the manifest's identity) and its newest master weights (every stage's "weights.<param>",
// whatever P, D, schedule and optimizer wrote it: the older versions 2bw and pipedream keep beside them, the
// optimizer's state and the data position are left where they are). Read through the checkpoint's own reader
// (src/run/checkpoint.h read_stage_files: sizes and sha256 checked), whatever its tensor file format.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "model/config.h"
#include "model/named_weights.h"
#include "src/data/tokenizer_file.h"

namespace nb {

struct SavedModel {
    std::string step_dir;
    ModelConfig model;
    int64_t seq_length = 0;  // the run's --seq-length
    NamedWeights weights;    // our parameter names (a tied head's copy on the last stage: once)
    // The checkpoint's copy of the run's tokenizer (STEP_DIR/tokenizer.json, checked against the manifest's
    // "tokenizer" identity); none where the run had none or the checkpoint is older than the field.
    std::optional<TokenizerFile> tokenizer;
};

// `load_path` (DIR, its newest complete checkpoint, or DIR/step_<t>). nb::RuntimeError naming the manifest or file
// for what is missing or damaged (the tokenizer's copy too), and for a tied matrix whose two copies (first and last
// stage) differ.
SavedModel read_saved_model(const std::string& load_path);

}  // namespace nb

// What `export` and `eval` read a model from: --load CKPT (src/run/saved_model.h) or --hf DIR
// (src/run/hf_folder.h), in one process.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "model/hf_config.h"
#include "model/named_weights.h"
#include "src/data/tokenizer_file.h"

namespace nb::cli {

struct ModelSource {
    HfModelConfig config;   // a checkpoint's: its model, its --seq-length as max_position_embeddings
    NamedWeights weights;   // our names, f32
    std::string name;       // the step directory or the folder
    int64_t seq_length = 0; // a checkpoint's --seq-length (0 for a folder)
    // The tokenizer that goes with the model (src/data/tokenizer_file.h): a checkpoint's copy of its run's
    // (STEP_DIR/tokenizer.json), or the folder's DIR/tokenizer.json; none where there is none.
    std::optional<TokenizerFile> tokenizer;
};

// UsageError naming `command` unless exactly one of `load` and `hf` is given, or under mpirun with more than one
// rank (the whole model is read and used by one process).
ModelSource read_model_source(const std::string& command, const std::string& load, const std::string& hf);

}  // namespace nb::cli

#include "src/cli/model_source.h"

#include <filesystem>

#include <fmt/format.h>

#include "src/core/error.h"
#include "src/core/mpi_env.h"
#include "src/run/hf_folder.h"
#include "src/run/saved_model.h"

namespace nb::cli {

ModelSource read_model_source(const std::string& command, const std::string& load, const std::string& hf) {
    if (mpi_world_size() > 1)
        throw UsageError(fmt::format("{} runs in one process (the whole model on one rank): run it without mpirun, "
                                     "not with {} ranks", command, mpi_world_size()));
    if (load.empty() == hf.empty())
        throw UsageError(fmt::format("{}: give exactly one of --load CKPT and --hf DIR", command));
    ModelSource s;
    if (!load.empty()) {
        SavedModel saved = read_saved_model(load);
        s.config.model = saved.model;
        s.config.max_position_embeddings = saved.seq_length;
        s.weights = std::move(saved.weights);
        s.name = saved.step_dir;
        s.seq_length = saved.seq_length;
        s.tokenizer = std::move(saved.tokenizer);
    } else {
        HfModel folder = read_hf_folder(hf);
        s.config = folder.config;
        s.weights = std::move(folder.weights);
        s.name = hf;
        const std::string tokenizer = hf + "/" + kTokenizerFileName;
        if (std::filesystem::exists(tokenizer)) s.tokenizer = read_tokenizer_file(tokenizer);
    }
    return s;
}

}  // namespace nb::cli

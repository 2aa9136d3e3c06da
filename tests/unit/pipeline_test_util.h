// Shared by the pipeline unit tests (reference, stage runner): a temporary folder, the command-line tests'
// corpus, a sink for progress lines, and a small untied pipeline run.
#pragma once

#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "model/config.h"
#include "src/plan/train_options.h"
#include "tests/unit/test_util.h"

namespace nb::test {


// The command-line tests' corpus (tests/cli/lib.sh), a few hundred short lines of bytes.
inline std::string write_corpus(const TempDir& dir) {
    const std::string path = dir.file("corpus.txt");
    std::ofstream out(path);
    for (int i = 1; i <= 400; ++i)
        out << "line " << i << ": the quick brown fox jumps over the lazy dog " << (i * 7919 % 1000) << "\n";
    REQUIRE(out.good());
    return path;
}

// Runs with the progress lines thrown away.
struct NullLog {
    std::FILE* f = std::fopen("/dev/null", "w");
    ~NullLog() { std::fclose(f); }
};

struct RunShape {
    int64_t num_layers, hidden_size, ffn_hidden_size, seq_length;
};

// A `tiny`-based untied model of the given shape (4 heads, 2 kv heads), 2 sequences per microbatch, lr 1e-3,
// the clip scope docs/DESIGN.md section 2 gives the schedule.
inline TrainOptions pipeline_run(const std::string& data, const std::string& schedule, int stages, int64_t m,
                                 int64_t iterations, const RunShape& shape) {
    TrainOptions o;
    o.model = nb::model_preset("tiny");
    o.model.num_layers = shape.num_layers;
    o.model.hidden_size = shape.hidden_size;
    o.model.ffn_hidden_size = shape.ffn_hidden_size;
    o.model.num_heads = 4;
    o.model.num_kv_heads = 2;
    o.model.tie_embeddings = false;
    o.data_path = data;
    o.micro_batch_size = 2;
    o.seq_length = shape.seq_length;
    o.num_microbatches = m;
    o.train_iters = iterations;
    o.lr.lr = 1e-3;
    o.eval_iters = 1;
    o.log_interval = 1000;
    o.schedule = parse_schedule_kind(schedule);
    o.stages = stages;
    o.clip_scope = clip_scope_of(o.schedule);
    return o;
}

}  // namespace nb::test

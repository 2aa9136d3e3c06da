// Timing generation for `nobubble bench generate` (src/run/generator.h): a model's prefill and decode tokens/s on
// this process's backend, and transformers' `generate` on the same weights exported as a Hugging Face folder, run
// by a Python interpreter in the same run on the same number of threads (the yardstick, measured beside ours).
//
//   ours:         Generator::generate, greedy, a prompt of P seeded random ids and N new tokens (no stop token);
//                 prefill tokens/s = P / prefill time, decode tokens/s = decode steps / their time; best of reps;
//   transformers: LlamaForCausalLM.generate(do_sample=False) in float32, torch.set_num_threads(threads); a call
//                 with 1 new token is the prefill (P / its time), one with N the whole, and decode tokens/s =
//                 (N - 1) / (whole - prefill); best of reps each, after one warm-up call.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/config.h"
#include "src/ops/ops.h"

namespace nb {

struct GenerateBenchOptions {
    int64_t prompt_tokens = 64, new_tokens = 64;
    int reps = 3;
    int threads = 1;
    std::string python;  // an interpreter with transformers ("": transformers is not run)
    std::string dir;     // an existing directory for the exported folder (removed after)
};

struct GenerationRates {
    double prefill_tokens_per_s = 0, decode_tokens_per_s = 0;
};

struct GenerateBenchRow {
    int64_t parameters = 0;
    GenerationRates ours;
    std::optional<GenerationRates> transformers;  // none: not run (`note` says why)
    std::optional<bool> same_tokens;              // whether transformers chose the same greedy tokens
    std::string note;
};

GenerateBenchRow bench_generate(Ops& ops, const ModelConfig& model, const GenerateBenchOptions& options);

}  // namespace nb

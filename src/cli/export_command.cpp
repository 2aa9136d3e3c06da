// `nobubble export`: a checkpoint (any P, D, schedule, optimizer; its newest master weights) or a Hugging Face
// folder as a Hugging Face LlamaForCausalLM folder (src/run/hf_folder.h; docs/interop.md).
#include <cctype>
#include <cstdint>
#include <optional>

#include <fmt/format.h>

#include "src/cli/commands.h"
#include "src/cli/model_source.h"
#include "src/core/byte_size.h"
#include "src/core/error.h"
#include "src/run/hf_folder.h"

namespace nb::cli {

namespace {

struct ExportFlags {
    std::string load, hf, out, dtype = "float32", max_shard_size = "5GB";
    std::optional<int64_t> bos_token_id, eos_token_id;
};

// transformers' sizes: an integer of bytes, or one with a unit: KB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB,
// TiB (powers of 1024), as its convert_file_size_to_int reads them.
int64_t parse_shard_size(const std::string& text) {
    size_t digits = 0;
    while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
    const std::string unit = text.substr(digits);
    const std::pair<const char*, int64_t> units[] = {{"", 1},           {"B", 1},
                                                     {"KB", 1000},      {"MB", 1000'000},
                                                     {"GB", 1000'000'000}, {"TB", 1000'000'000'000},
                                                     {"KiB", 1LL << 10}, {"MiB", 1LL << 20},
                                                     {"GiB", 1LL << 30}, {"TiB", 1LL << 40}};
    for (const auto& [name, scale] : units)
        if (digits > 0 && digits <= 12 && unit == name) {
            const int64_t n = std::stoll(text.substr(0, digits));
            if (n > 0) return n * scale;
        }
    throw UsageError(fmt::format("--max-shard-size '{}': give a positive size such as 5GB, 500MB or 2GiB", text));
}

int run_export(const ExportFlags& f) {
    HfWriteOptions o{f.out, kHfExportDTypes.parse(f.dtype), parse_shard_size(f.max_shard_size)};
    ModelSource s = read_model_source("export", f.load, f.hf);
    // The token ids: the flags, else the folder's own (--hf), else the tokenizer's <|endoftext|> (the id that
    // delimits documents in the shards run/prepare_tokens.py writes).
    if (s.tokenizer && s.tokenizer->eot_id) {
        if (!s.config.bos_token_id) s.config.bos_token_id = *s.tokenizer->eot_id;
        if (!s.config.eos_token_id) s.config.eos_token_id = *s.tokenizer->eot_id;
    }
    if (f.bos_token_id) s.config.bos_token_id = *f.bos_token_id;
    if (f.eos_token_id) s.config.eos_token_id = *f.eos_token_id;
    o.tokenizer = s.tokenizer;
    const int64_t bytes = write_hf_folder(s.config, s.weights, o);
    fmt::print("exported {} to {}: LlamaForCausalLM, {} tensors in {}, {} of safetensors{}\n", s.name, f.out,
               s.weights.size(), f.dtype, format_bytes(bytes),
               s.tokenizer ? fmt::format(", tokenizer {} ({} ids)", s.tokenizer->path, s.tokenizer->vocab_size) : "");
    return 0;
}

}  // namespace

Command add_export_command(CLI::App& app) {
    auto* sub = app.add_subcommand("export", "Write a checkpoint as a Hugging Face LlamaForCausalLM folder "
                                             "(config.json, safetensors, generation_config.json; the tokenizer's "
                                             "files where it has one)");
    auto flags = std::make_shared<ExportFlags>();
    sub->add_option("--load", flags->load, "The checkpoint: DIR (its newest complete one) or DIR/step_<t>");
    sub->add_option("--hf", flags->hf, "Or a Hugging Face Llama folder, written again (e.g. in another --dtype)");
    sub->add_option("--out", flags->out, "The folder to write (must not exist; written beside it, then renamed)")
        ->required();
    sub->add_option("--dtype", flags->dtype, "Tensor dtype: " + kHfExportDTypes.choices_text())
        ->capture_default_str();
    sub->add_option("--max-shard-size", flags->max_shard_size,
                    "Above this, sharded files and model.safetensors.index.json, as transformers (5GB, 2GiB, ...)")
        ->capture_default_str();
    sub->add_option("--bos-token-id", flags->bos_token_id,
                    "The tokenizer's beginning-of-sequence id, for config.json (default: the folder's, else the "
                    "tokenizer's <|endoftext|>)");
    sub->add_option("--eos-token-id", flags->eos_token_id,
                    "The tokenizer's end-of-sequence id, for config.json (default: the folder's, else the tokenizer's "
                    "<|endoftext|>)");
    return {sub, [flags] { return run_export(*flags); }};
}

}  // namespace nb::cli

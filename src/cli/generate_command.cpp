// `nobubble generate`: text from a checkpoint (--load; a pipeline's stages gathered into one process) or a Hugging
// Face folder (--hf), decoded one token at a time with a KV cache (src/run/generator.h). The text goes through
// the model's tokenizer (the checkpoint's copy, the folder's tokenizer.json, or --tokenizer), or is bytes where it
// has none (src/run/text_codec.h); generation stops after "<|endoftext|>" unless --ignore-eos.
// stdout: the prompt and its continuation as text (--print-ids: the new ids on a line after it); stderr: one line
// of prefill and decode tokens/s.
#include <cstdio>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "src/cli/commands.h"
#include "src/cli/model_source.h"
#include "src/core/error.h"
#include "src/run/backend.h"
#include "src/run/generator.h"
#include "src/run/text_codec.h"

namespace nb::cli {

namespace {

struct GenerateFlags {
    std::string load, hf, device = "cpu", prompt, tokenizer;
    int64_t max_new_tokens = 50;
    SamplingOptions sampling;
    bool print_ids = false, ignore_eos = false;
};

int run_generate(const GenerateFlags& f) {
    check_sampling_options(f.sampling);
    const ModelSource m = read_model_source("generate", f.load, f.hf);
    const TextCodec codec = TextCodec::for_model(f.tokenizer.empty() ? m.tokenizer
                                                                     : std::optional(read_tokenizer_file(f.tokenizer)),
                                                 m.config.model.vocab_size);
    const int64_t max_positions = m.seq_length > 0 ? m.seq_length : m.config.max_position_embeddings;
    std::unique_ptr<Ops> ops = make_ops(parse_device(f.device));
    Generator generator(*ops, m.config.model, m.weights, m.name, max_positions);
    GenerationRequest request;
    request.prompt = codec.encode(f.prompt);
    if (!f.ignore_eos) request.stop_token = codec.end_of_text();
    request.max_new_tokens = f.max_new_tokens;
    request.sampling = f.sampling;
    GenerationTimes t;
    const std::vector<int32_t> ids = generator.generate(request, &t);
    fmt::print("{}{}\n", f.prompt, codec.decode(ids));
    if (f.print_ids) fmt::print("ids: {}\n", fmt::join(ids, " "));
    std::fflush(stdout);
    fmt::print(stderr, "generate: {} prompt tokens in {:.3f} s ({:.1f} tokens/s), {} decode steps in {:.3f} s "
               "({:.1f} tokens/s)\n", t.prefill_tokens, t.prefill_s, t.prefill_tokens / std::max(t.prefill_s, 1e-9),
               t.decode_tokens, t.decode_s, t.decode_tokens / std::max(t.decode_s, 1e-9));
    return 0;
}

}  // namespace

Command add_generate_command(CLI::App& app) {
    auto* sub = app.add_subcommand("generate", "Text from a checkpoint or a Hugging Face folder: the prompt, then one "
                                               "token at a time with a KV cache");
    auto flags = std::make_shared<GenerateFlags>();
    sub->add_option("--load", flags->load, "A checkpoint: DIR (its newest complete one) or DIR/step_<t>");
    sub->add_option("--hf", flags->hf, "A Hugging Face LlamaForCausalLM folder (config.json, safetensors)");
    sub->add_option("--device", flags->device, kDevices.choices_text())->capture_default_str();
    sub->add_option("--prompt", flags->prompt, "The text to continue")->required();
    sub->add_option("--max-new-tokens", flags->max_new_tokens,
                    "Tokens to generate (the prompt and these within the model's sequence length)")
        ->capture_default_str();
    sub->add_option("--temperature", flags->sampling.temperature, "0: greedy (the most likely token); else sample "
                                                                  "from softmax(logits / T)")
        ->capture_default_str();
    sub->add_option("--top-k", flags->sampling.top_k, "Sample among the K most likely tokens only (0: all)")
        ->capture_default_str();
    sub->add_option("--top-p", flags->sampling.top_p, "Sample among the most likely tokens whose probability "
                                                      "reaches P (1: all)")
        ->capture_default_str();
    add_seed_flag(*sub, flags->sampling.seed, "The sampling's seed: the same seed, the same text");
    sub->add_option("--tokenizer", flags->tokenizer, "A tokenizer.json in place of the model's own");
    sub->add_flag("--ignore-eos", flags->ignore_eos, "Do not stop at <|endoftext|>: always --max-new-tokens tokens");
    sub->add_flag("--print-ids", flags->print_ids, "Also print the new token ids, on a line 'ids: ...'");
    return {sub, [flags] { return run_generate(*flags); }};
}

}  // namespace nb::cli

// `nobubble bench generate`: prefill and decode tokens/s of `generate` (src/run/generator.h, KV cache) for tiny and
// smollm-135m at one thread, beside transformers' generate on the same weights, in the same run
// (src/run/generate_bench.h). Targets (issue 40): decode >= 2x transformers' tokens/s on tiny, >= 1x on smollm-135m.
#include <cstdlib>
#include <filesystem>

#include <fmt/format.h>

#include "src/cli/commands.h"
#include "src/cpu/cpu_threads.h"
#include "src/run/backend.h"
#include "src/run/checkpoint_bench.h"
#include "src/run/generate_bench.h"

namespace nb::cli {

namespace {

struct BenchGenerateFlags {
    std::vector<std::string> models = {"tiny", "smollm-135m"};
    std::vector<double> targets = {2.0, 1.0};  // decode tokens/s over transformers', by model
    GenerateBenchOptions options;
};

// The interpreter with transformers: `make hf-venv`'s beside the binary's build folder, else none.
std::string default_python() {
    const char* env = std::getenv("NOBUBBLE_HF_PYTHON");
    if (env && *env) return env;
    const std::filesystem::path venv = std::filesystem::path("build") / "venv" / "bin" / "python";
    return std::filesystem::exists(venv) ? venv.string() : "";
}

int run_bench_generate(BenchGenerateFlags f) {
    cpu::set_thread_count(f.options.threads);
    if (f.options.python.empty()) f.options.python = default_python();
    const char* tmp = std::getenv("TMPDIR");
    const ScratchDir scratch(tmp && *tmp ? tmp : "/tmp");
    f.options.dir = scratch.path();
    fmt::print("generate, greedy, a prompt of {} random ids then {} new tokens, {} thread(s), best of {}; "
               "transformers: LlamaForCausalLM.generate(do_sample=False) float32 on the same weights ({})\n",
               f.options.prompt_tokens, f.options.new_tokens, f.options.threads, f.options.reps,
               f.options.python.empty() ? "not run: no interpreter" : f.options.python);
    fmt::print("  {:<12} {:>12} {:>14} {:>14} {:>14} {:>14} {:>8} {:>8} {:>7}  {}\n", "model", "params",
               "prefill tok/s", "decode tok/s", "hf prefill", "hf decode", "decode x", "target", "same", "");
    std::unique_ptr<Ops> ops = make_ops(Device::cpu);
    bool met = true;
    for (size_t i = 0; i < f.models.size(); ++i) {
        const GenerateBenchRow r = bench_generate(*ops, model_preset(f.models[i]), f.options);
        const double target = i < f.targets.size() ? f.targets[i] : 1.0;
        if (r.transformers) {
            const double ratio = r.ours.decode_tokens_per_s / r.transformers->decode_tokens_per_s;
            met = met && ratio >= target;
            fmt::print("  {:<12} {:>12} {:>14.1f} {:>14.1f} {:>14.1f} {:>14.1f} {:>7.2f}x {:>7.1f}x {:>7}  {}\n",
                       f.models[i], r.parameters, r.ours.prefill_tokens_per_s, r.ours.decode_tokens_per_s,
                       r.transformers->prefill_tokens_per_s, r.transformers->decode_tokens_per_s, ratio, target,
                       *r.same_tokens ? "yes" : "no", ratio >= target ? "met" : "not met");
        } else {
            met = false;
            fmt::print("  {:<12} {:>12} {:>14.1f} {:>14.1f}  {}\n", f.models[i], r.parameters,
                       r.ours.prefill_tokens_per_s, r.ours.decode_tokens_per_s, r.note);
        }
    }
    fmt::print("target: decode tokens/s >= the target times transformers' on the same thread count: {}\n",
               met ? "met" : "not met");
    return 0;
}

}  // namespace

Command add_bench_generate_command(CLI::App& bench) {
    auto* sub = bench.add_subcommand("generate", "Prefill and decode tokens/s of generate against transformers' "
                                                 "generate, at one thread");
    auto flags = std::make_shared<BenchGenerateFlags>();
    sub->add_option("--models", flags->models, "Presets to time")->capture_default_str();
    sub->add_option("--targets", flags->targets, "Decode tokens/s over transformers' to meet, by model")
        ->capture_default_str();
    sub->add_option("--prompt-tokens", flags->options.prompt_tokens, "Prompt length")
        ->capture_default_str()->check(CLI::Range(1, 100000));
    sub->add_option("--new-tokens", flags->options.new_tokens, "Tokens generated")
        ->capture_default_str()->check(CLI::Range(2, 100000));
    sub->add_option("--reps", flags->options.reps, "Repetitions (the best is kept)")
        ->capture_default_str()->check(CLI::Range(1, 100));
    sub->add_option("--threads", flags->options.threads, "CPU threads, ours and torch's")
        ->capture_default_str()->check(CLI::Range(1, 1024));
    sub->add_option("--python", flags->options.python, "Python with transformers (default: $NOBUBBLE_HF_PYTHON, "
                                                       "else build/venv/bin/python)");
    return {sub, [flags] { return run_bench_generate(*flags); }};
}

}  // namespace nb::cli

#include "src/run/generate_bench.h"

#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include <fmt/format.h>

#include "model/stage_model.h"
#include "src/core/error.h"
#include "src/core/json_reader.h"
#include "src/core/rng.h"
#include "src/run/generator.h"
#include "src/run/hf_folder.h"

namespace nb {

namespace {

// transformers' side, run as `python -c`; prints one JSON object. synced_gpus=False: transformers would otherwise
// import torch.distributed.fsdp to ask, which Debian's torch 1.13 cannot import under Python 3.11.
constexpr const char* kTransformersScript = R"(
import json, sys, time
import torch
torch.set_num_threads(int(sys.argv[4]))
from transformers import LlamaForCausalLM
folder, prompt, n, reps = sys.argv[1], [int(t) for t in sys.argv[2].split(",")], int(sys.argv[3]), int(sys.argv[5])
model = LlamaForCausalLM.from_pretrained(folder, torch_dtype=torch.float32, attn_implementation="eager").eval()
model.generation_config.eos_token_id = None
x = torch.tensor([prompt])
def run(k):
    t = time.perf_counter()
    out = model.generate(x, do_sample=False, max_new_tokens=k, min_new_tokens=k, eos_token_id=None, pad_token_id=0,
                         synced_gpus=False)
    return time.perf_counter() - t, out[0, len(prompt):].tolist()
with torch.no_grad():
    run(2)
    prefill = min(run(1)[0] for _ in range(reps))
    runs = [run(n) for _ in range(reps)]
print(json.dumps({"prefill_s": prefill, "whole_s": min(t for t, _ in runs), "ids": runs[0][1]}))
)";

std::string shell_quote(const std::string& s) {
    std::string out = "'";
    for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out + "'";
}

struct TransformersRun {
    std::optional<GenerationRates> rates;
    std::vector<int32_t> ids;
    std::string note;
};

TransformersRun run_transformers(const std::string& folder, const std::vector<int32_t>& prompt,
                                 const GenerateBenchOptions& o) {
    TransformersRun r;
    const std::string cmd = fmt::format("{} -c {} {} {} {} {} {} 2>&1", shell_quote(o.python),
                                        shell_quote(kTransformersScript), shell_quote(folder),
                                        fmt::join(prompt, ","), o.new_tokens, o.threads, o.reps);
    std::FILE* pipe = ::popen(cmd.c_str(), "r");
    if (!pipe) throw RuntimeError(fmt::format("bench generate: cannot run {}", o.python));
    std::string out;
    char buffer[4096];
    while (size_t n = std::fread(buffer, 1, sizeof buffer, pipe)) out.append(buffer, n);
    const int status = ::pclose(pipe);
    const size_t brace = out.rfind("\n{");
    const std::string last = brace == std::string::npos ? out : out.substr(brace + 1);
    if (status != 0 || last.empty() || last[0] != '{') {
        r.note = fmt::format("transformers did not run ({}): {}", o.python, printable(out, 300));
        return r;
    }
    const Json j = read_json(last, "transformers' timing");
    const double prefill_s = json_number(json_at(j, "prefill_s", "transformers"), "transformers", "prefill_s");
    const double whole_s = json_number(json_at(j, "whole_s", "transformers"), "transformers", "whole_s");
    for (const Json& id : json_array(json_at(j, "ids", "transformers"), "transformers", "ids"))
        r.ids.push_back(static_cast<int32_t>(json_int64(id, "transformers", "id")));
    r.rates = GenerationRates{static_cast<double>(prompt.size()) / prefill_s,
                              static_cast<double>(o.new_tokens - 1) / std::max(whole_s - prefill_s, 1e-9)};
    return r;
}

}  // namespace

GenerateBenchRow bench_generate(Ops& ops, const ModelConfig& model, const GenerateBenchOptions& o) {
    GenerateBenchRow row;
    const NamedWeights weights = initial_named_weights(model, 1234);
    for (const auto& [name, t] : weights) row.parameters += t.numel();
    Rng rng(Rng::mix(1234, "bench generate prompt"));
    GenerationRequest request;
    for (int64_t i = 0; i < o.prompt_tokens; ++i)
        request.prompt.push_back(static_cast<int32_t>(rng.below(static_cast<uint64_t>(model.vocab_size))));
    request.max_new_tokens = o.new_tokens;
    request.sampling.temperature = 0;
    Generator generator(ops, model, weights, model.preset, o.prompt_tokens + o.new_tokens);
    std::vector<int32_t> ours;
    for (int rep = 0; rep <= o.reps; ++rep) {  // rep 0 warms up
        GenerationTimes t;
        ours = generator.generate(request, &t);
        if (rep == 0) continue;
        row.ours.prefill_tokens_per_s = std::max(row.ours.prefill_tokens_per_s, t.prefill_tokens / t.prefill_s);
        row.ours.decode_tokens_per_s = std::max(row.ours.decode_tokens_per_s, t.decode_tokens / t.decode_s);
    }
    if (o.python.empty()) {
        row.note = "transformers not run (no --python)";
        return row;
    }
    const std::string folder = (std::filesystem::path(o.dir) / fmt::format("bench_generate_{}", model.preset)).string();
    std::filesystem::remove_all(folder);
    HfModelConfig config;
    config.model = model;
    config.max_position_embeddings = o.prompt_tokens + o.new_tokens;
    write_hf_folder(config, weights, HfWriteOptions{folder});
    TransformersRun theirs = run_transformers(folder, request.prompt, o);
    std::filesystem::remove_all(folder);
    row.transformers = theirs.rates;
    row.note = theirs.note;
    if (theirs.rates) row.same_tokens = theirs.ids == ours;
    return row;
}

}  // namespace nb

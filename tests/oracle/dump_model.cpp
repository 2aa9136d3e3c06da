// dump_model --workdir DIR [--tied]: one forward/backward of a whole model on the CPU, written to DIR for
// tests/oracle/test_model.py to check against an independent float64 LLaMA in torch.
//
// Cases:
//   default   the `tiny` preset (untied head), batch 2, seq_len 64;
//   --tied    `tiny` with tied embeddings, batch 3, seq_len 48 (not a power of two, not a multiple of the
//             attention kernel's query tile).
// Both keep tiny's grouped-query attention (4 heads, 2 kv heads). Weights come from init_weights(seed); then
// every norm gain is perturbed to 1 + 0.1 * noise, so the gains (and the input of each norm) carry information
// and their gradients are not a symmetric sum.
//
// Files in DIR (raw little-endian; float32 unless named .i32):
//   manifest.json                   config, batch shape, loss, and the list of params / activations below
//   tokens.i32, targets.i32         [batch * seq_len]
//   logits.f32                      [batch * seq_len, vocab] (the head stash's logits)
//   w.<name>.f32, g.<name>.f32      each parameter and its gradient from forward_backward (canonical order)
//   act.<k>.f32                     output of layer k (embedding, block 0..L-1): the residual stream
//   dact.<k>.f32                    d loss / d (output of layer k), from running the layers' backwards by hand
// The layer-by-layer pass must reproduce forward_backward's loss and gradients bit for bit (ops are
// deterministic); the manifest records whether it did.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "src/cpu/cpu_ops.h"
#include "model/stage_model.h"
#include "model/model_step.h"
#include "model/output_head.h"
#include "src/core/rng.h"

#include "tests/oracle/dump_files.h"

using namespace nb;
using nb::oracle::write_raw;
using nb::oracle::write_text;

namespace {

constexpr uint64_t kInitSeed = 1234;
constexpr uint64_t kGainSeed = 99;
constexpr uint64_t kDataSeed = 2024;

void write_tensor(const std::string& dir, const std::string& file, const Tensor& t) {
    const void* p = t.dtype() == DType::f32 ? static_cast<const void*>(t.f32()) : static_cast<const void*>(t.i32());
    write_raw(dir + "/" + file, p, t.bytes());
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
    return a.numel() == b.numel() && a.dtype() == b.dtype() &&
           std::memcmp(a.f32(), b.f32(), a.bytes()) == 0;
}

std::string json_shape(const Shape& s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

}  // namespace

int main(int argc, char** argv) {
    const std::optional<oracle::WorkdirArgs> args =
        oracle::parse_workdir_args(argc, argv, {"--tied"}, "dump_model --workdir DIR [--tied]");
    if (!args) return 2;
    const std::string& workdir = args->workdir;
    const bool tied = args->has("--tied");
    try {
        std::filesystem::create_directories(workdir);

        ModelConfig config = model_preset("tiny");
        config.tie_embeddings = tied;
        const int64_t batch_size = tied ? 3 : 2;
        const int64_t seq_len = tied ? 48 : 64;

        const StageModel model(config, whole_model_spec(config));
        const ParamLayout& layout = model.layout();
        TensorSet weights = model.init_weights(kInitSeed);
        for (int i = 0; i < layout.size(); ++i) {
            if (layout[i].kind != ParamKind::norm_gain) continue;
            Rng rng(Rng::mix(kGainSeed, layout[i].name));
            float* p = weights[i].f32();
            for (int64_t j = 0; j < weights[i].numel(); ++j) p[j] = 1.0f + 0.1f * rng.normal();
        }

        Microbatch batch;
        batch.batch_size = batch_size;
        batch.seq_len = seq_len;
        batch.tokens = Tensor::zeros({batch.rows()}, DType::i32);
        batch.targets = Tensor::zeros({batch.rows()}, DType::i32);
        Rng data_rng(kDataSeed + (tied ? 1 : 0));
        for (int64_t n = 0; n < batch.rows(); ++n) {
            batch.tokens.i32()[n] = static_cast<int32_t>(data_rng.below(static_cast<uint64_t>(config.vocab_size)));
            batch.targets.i32()[n] = static_cast<int32_t>(data_rng.below(static_cast<uint64_t>(config.vocab_size)));
        }

        CpuOps ops;
        TensorSet grads = TensorSet::zeros(layout);
        const float loss = forward_backward(ops, model, weights, grads, batch, 1.0f);

        // The same pass layer by layer, keeping what forward_backward does not expose.
        const auto& layers = model.layers();
        TensorSet grads2 = TensorSet::zeros(layout);
        LayerContext ctx{ops, weights, &grads2, batch};
        std::vector<Stash> stashes(layers.size());
        std::vector<Tensor> acts;  // output of every layer but the head
        Tensor x;
        for (size_t i = 0; i < layers.size(); ++i) {
            x = layers[i]->forward(ctx, x, &stashes[i]);
            if (i + 1 < layers.size()) acts.push_back(x.clone());
        }
        const float loss2 = x.f32()[0];
        const Tensor logits = stashes.back().saved_as<HeadSaved>().logits.clone();
        if (logits.shape() != Shape{batch.rows(), config.vocab_size})
            throw std::runtime_error("head stash entry 3 is not the logits: shape " + shape_string(logits.shape()));
        std::vector<Tensor> dacts(acts.size());
        Tensor dx = Tensor::zeros({1});
        dx.f32()[0] = 1.0f;
        for (size_t i = layers.size(); i-- > 0;) {
            dx = layers[i]->backward(ctx, dx, stashes[i]);
            if (i > 0) dacts[i - 1] = dx.clone();
        }
        bool same = std::memcmp(&loss, &loss2, sizeof(float)) == 0;
        for (int i = 0; i < layout.size(); ++i) same = same && bitwise_equal(grads[i], grads2[i]);

        // Files.
        write_tensor(workdir, "tokens.i32", batch.tokens);
        write_tensor(workdir, "targets.i32", batch.targets);
        write_tensor(workdir, "logits.f32", logits);
        std::vector<std::string> params;
        const std::vector<oracle::ParamFiles> files = oracle::write_param_files(workdir, layout, weights, grads);
        for (int i = 0; i < layout.size(); ++i) {
            const ParamInfo& p = layout[i];
            params.push_back(fmt::format(R"(    {{"name": "{}", "shape": {}, "kind": "{}", "weight": "{}", "grad": "{}"}})",
                                         p.name, json_shape(p.shape), param_kind_name(p.kind), files[i].weight,
                                         files[i].grad));
        }
        std::vector<std::string> act_entries;
        for (size_t k = 0; k < acts.size(); ++k) {
            const std::string af = fmt::format("act.{}.f32", k), df = fmt::format("dact.{}.f32", k);
            write_tensor(workdir, af, acts[k]);
            write_tensor(workdir, df, dacts[k]);
            act_entries.push_back(fmt::format(R"(    {{"layer": "{}", "shape": {}, "value": "{}", "grad": "{}"}})",
                                              layers[k]->name(), json_shape(acts[k].shape()), af, df));
        }
        const std::string manifest = fmt::format(
            "{{\n"
            "  \"case\": \"{}\",\n"
            "  \"config\": {{\"preset\": \"{}\", \"vocab_size\": {}, \"hidden_size\": {}, \"ffn_hidden_size\": {}, "
            "\"num_layers\": {}, \"num_heads\": {}, \"num_kv_heads\": {}, \"rope_theta\": {:.17g}, "
            "\"norm_eps\": {:.17g}, \"tie_embeddings\": {}}},\n"
            "  \"batch_size\": {},\n"
            "  \"seq_len\": {},\n"
            "  \"loss\": {:.9g},\n"
            "  \"layerwise_matches_forward_backward\": {},\n"
            "  \"tokens\": \"tokens.i32\",\n"
            "  \"targets\": \"targets.i32\",\n"
            "  \"logits\": \"logits.f32\",\n"
            "  \"params\": [\n{}\n  ],\n"
            "  \"activations\": [\n{}\n  ]\n"
            "}}\n",
            tied ? "tied" : "untied", config.preset, config.vocab_size, config.hidden_size, config.ffn_hidden_size,
            config.num_layers, config.num_heads, config.num_kv_heads, config.rope_theta, config.norm_eps,
            config.tie_embeddings, batch_size, seq_len, loss, same, fmt::join(params, ",\n"),
            fmt::join(act_entries, ",\n"));
        write_text(workdir + "/manifest.json", manifest);
        std::printf("dump_model: %s case, loss %.9g, %d params written to %s\n", tied ? "tied" : "untied", loss,
                    layout.size(), workdir.c_str());
    } catch (const std::exception& e) {
        std::fprintf(stderr, "dump_model: error: %s\n", e.what());
        return 1;
    }
    return 0;
}

// dump_adamw --workdir DIR: ten AdamW steps (warm-up + cosine LR, clipping at norm 1.0) on a small layout,
// written to DIR for tests/oracle/test_adamw.py to replay with torch.optim.AdamW.
//
// Files in DIR, raw little-endian float32, each holding all parameters concatenated in layout order:
//   weights_init.f32, grads_<k>.f32 (k = 0..9, before clipping), weights_final.f32, exp_avg_final.f32,
//   exp_avg_sq_final.f32; and manifest.json naming the parameters, hyperparameters, lrs and our grad norms.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "src/cpu/cpu_ops.h"
#include "model/params.h"
#include "optim/adamw.h"
#include "optim/grad_clip.h"
#include "optim/lr_schedule.h"

#include "tests/oracle/dump_files.h"

using namespace nb;
using namespace nb::oracle;

constexpr int kSteps = 10;
constexpr double kMaxGradNorm = 1.0;
// Target global gradient norm of each step: some above 1.0 (clipped), some below (not clipped).
constexpr double kGradNorms[kSteps] = {0.5, 2.0, 0.7, 3.0, 0.3, 1.6, 0.6, 4.0, 0.85, 2.5};

static ParamLayout make_layout() {
    return layout_of({{"embedding", {11, 4}, ParamKind::embedding},
                      {"layers.0.attn_norm", {9}, ParamKind::norm_gain},
                      {"layers.0.attn.wq", {7, 5}, ParamKind::hidden_matrix},
                      {"layers.0.mlp.w1", {16, 16}, ParamKind::hidden_matrix},
                      {"final_norm", {9}, ParamKind::norm_gain},
                      {"head", {5, 7}, ParamKind::output_head}});
}

static std::string manifest_json(const ParamLayout& layout, const AdamWConfig& adam, const std::vector<float>& lrs,
                                 const std::vector<double>& norms) {
    std::vector<std::string> params;
    for (const ParamInfo& p : layout.params())
        params.push_back(fmt::format(R"(    {{"name": "{}", "shape": [{}], "kind": "{}", "weight_decay": {}}})", p.name,
                                     fmt::join(p.shape, ", "), param_kind_name(p.kind), p.weight_decay()));
    std::vector<std::string> grad_files;
    for (int k = 0; k < kSteps; ++k) grad_files.push_back(fmt::format(R"("grads_{}.f32")", k));
    // {:.9g} prints a float32 exactly enough to read it back bit for bit; {:.17g} does the same for a double.
    std::vector<std::string> lr_text, norm_text;
    for (float lr : lrs) lr_text.push_back(fmt::format("{:.9g}", lr));
    for (double n : norms) norm_text.push_back(fmt::format("{:.17g}", n));
    return fmt::format(
        "{{\n"
        "  \"steps\": {},\n"
        "  \"beta1\": {:.9g}, \"beta2\": {:.9g}, \"eps\": {:.9g}, \"weight_decay\": {:.9g},\n"
        "  \"max_grad_norm\": {},\n"
        "  \"params\": [\n{}\n  ],\n"
        "  \"weights_init\": \"weights_init.f32\",\n"
        "  \"grads\": [{}],\n"
        "  \"lrs\": [{}],\n"
        "  \"grad_norms\": [{}],\n"
        "  \"weights_final\": \"weights_final.f32\",\n"
        "  \"exp_avg_final\": \"exp_avg_final.f32\",\n"
        "  \"exp_avg_sq_final\": \"exp_avg_sq_final.f32\"\n"
        "}}\n",
        kSteps, adam.beta1, adam.beta2, adam.eps, adam.weight_decay, kMaxGradNorm, fmt::join(params, ",\n"),
        fmt::join(grad_files, ", "), fmt::join(lr_text, ", "), fmt::join(norm_text, ", "));
}

int main(int argc, char** argv) {
    const std::optional<WorkdirArgs> args = parse_workdir_args(argc, argv, {}, "dump_adamw --workdir DIR");
    if (!args) return 2;
    const std::string& workdir = args->workdir;
    try {
        CpuOps ops;
        const ParamLayout layout = make_layout();
        std::mt19937 rng(20240611);

        TensorSet weights = initial_weights(layout, rng);
        write_set(workdir + "/weights_init.f32", weights);

        LrScheduleConfig sched_cfg;
        sched_cfg.decay_style = nb::LrDecayStyle::cosine;
        sched_cfg.lr = 1e-2;
        sched_cfg.min_lr = 1e-3;
        sched_cfg.warmup_iters = 3;
        const LrSchedule schedule(sched_cfg, kSteps);

        AdamWConfig adam_cfg;  // beta1 0.9, beta2 0.95, eps 1e-8, weight decay 0.1
        AdamW adamw(layout, adam_cfg);

        std::vector<float> lrs;
        std::vector<double> norms;
        for (int k = 0; k < kSteps; ++k) {
            TensorSet grads = random_grads(layout, rng, kGradNorms[k]);
            write_set(fmt::format("{}/grads_{}.f32", workdir, k), grads);
            norms.push_back(clip_grad_norm(ops, layout, grads, kMaxGradNorm));
            const float lr = static_cast<float>(schedule.lr_at(k));
            lrs.push_back(lr);
            adamw.step(ops, layout, weights, grads, lr);
        }

        write_set(workdir + "/weights_final.f32", weights);
        // state_tensors(): exp_avg of every parameter, then exp_avg_sq of every parameter.
        std::vector<const Tensor*> exp_avg, exp_avg_sq;
        for (const auto& [name, tensor] : adamw.state_tensors())
            (name.starts_with("exp_avg_sq.") ? exp_avg_sq : exp_avg).push_back(tensor);
        write_tensors(workdir + "/exp_avg_final.f32", exp_avg);
        write_tensors(workdir + "/exp_avg_sq_final.f32", exp_avg_sq);
        write_text(workdir + "/manifest.json", manifest_json(layout, adam_cfg, lrs, norms));
    } catch (const std::exception& e) {
        std::fprintf(stderr, "dump_adamw: error: %s\n", e.what());
        return 1;
    }
    return 0;
}

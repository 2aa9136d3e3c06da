// dump_moe_bias --workdir DIR: the expert bias of aux-loss-free balancing (docs/DESIGN.md section 7) over several
// optimizer steps, through the real code: an MoeFeedForward whose layout holds layers.0.moe.expert_bias (zero at
// the start), each step a few microbatches of forward + backward (backward adds the microbatch's loads into the
// bias's gradient slot), then StageOptimizer::step (AdamW on every other parameter, then the bias update).
// tests/oracle/test_moe_bias.py recomputes the routing and the rule from the same inputs, independently.
//
// Objective of each microbatch: L = sum(out * R) + L_aux (R random), so the router's weights move between steps.
// Cases (d = 16, per-expert f = 8):
//   drift      E 6, k 2, renorm, 16 tokens x 3 microbatches, 6 steps, rate 0.02, AdamW lr 1e-2 with weight decay
//              0.1: the router starts biased towards a few experts, and the bias shifts selections over the steps
//   mean_tie   E 4, k 1, 8 tokens x 2 microbatches, 3 steps, rate 1e-3, lr 0 (the router stays fixed): each
//              token is aimed at one expert, loads 3 1 2 2 per microbatch (6 2 4 4 a step, mean 4): experts 2 and 3
//              sit on the mean (sign 0, their bias stays 0)
//
// Files in DIR/<case>/ (raw little-endian; float32 unless named .i32):
//   manifest.json                      the config (steps, microbatches, rate, ...)
//   step<s>/router.f32 [E,d]           the router's weights step s computes with
//   step<s>/bias.f32 [E]               the bias step s selects with (the weights' own tensor)
//   step<s>/loads.f32 [E]              the bias's gradient slot after step s's backwards: the summed loads
//   step<s>/mb<m>.h.f32 [N,d], mb<m>.probs.f32 [N,E], mb<m>.topk_expert.i32 [N,k]
//   final_bias.f32 [E]                 after the last step
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "model/moe_layer.h"
#include "optim/stage_optimizer.h"
#include "src/cpu/cpu_ops.h"

#include "tests/oracle/dump_files.h"

using namespace nb;

namespace {

constexpr int64_t kHidden = 16;  // the feature size of every case

struct Case {
    std::string name;
    MoeConfig moe;
    int64_t tokens, microbatches, steps;
    float lr, weight_decay;
    bool aimed_tokens;  // mean_tie: token n is a unit vector aimed at expert kAim[n] by a diagonal router
};

constexpr int kAim[8] = {0, 0, 0, 1, 2, 2, 3, 3};  // loads 3 1 2 2, mean 2

std::vector<Case> cases() {
    return {
        {"drift",
         {.num_experts = 6, .topk = 2, .ffn_hidden_size = 8, .shared_ffn_hidden_size = 0, .aux_loss_coeff = 0.01,
          .topk_renorm = true, .expert_bias = true, .bias_update_rate = 0.02},
         16, 3, 6, 1e-2f, 0.1f, false},
        {"mean_tie",
         {.num_experts = 4, .topk = 1, .ffn_hidden_size = 8, .shared_ffn_hidden_size = 0, .aux_loss_coeff = 0.0,
          .topk_renorm = false, .expert_bias = true, .bias_update_rate = 1e-3},
         8, 2, 3, 0.0f, 0.1f, true},
    };
}

void write_tensor(const std::string& path, const Tensor& t) { oracle::write_raw(path, t.data(), t.bytes()); }

Tensor normal(const Shape& shape, std::mt19937& rng, float mean, float stddev) {
    Tensor t = Tensor::zeros(shape);
    std::normal_distribution<float> dist(mean, stddev);
    for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = dist(rng);
    return t;
}

// mean_tie's tokens: h[n] = the unit vector of feature kAim[n], and the router's row e = 4 x unit vector e, so
// token n's logits are 4 at its expert and 0 elsewhere.
Tensor aimed_tokens(int64_t tokens) {
    Tensor h = Tensor::zeros({tokens, kHidden});
    for (int64_t n = 0; n < tokens; ++n) h.f32()[n * kHidden + kAim[n % 8]] = 1.0f;
    return h;
}

void aim_router(Tensor& router) {
    router.zero();
    for (int64_t e = 0; e < router.dim(0); ++e) router.f32()[e * kHidden + e] = 4.0f;
}

void dump_case(const Case& c, const std::string& dir, uint64_t seed) {
    std::mt19937 rng(static_cast<uint32_t>(seed));
    ParamLayout layout;
    const MoeFeedForward moe(kHidden, c.moe, "layers.0.moe", layout);
    const int router = layout.index_of("layers.0.moe.router.weight");
    const int bias = layout.index_of("layers.0.moe.expert_bias");
    if (router < 0 || bias < 0) throw std::runtime_error("the layout lacks the router or the expert bias");
    TensorSet weights = TensorSet::zeros(layout);
    for (int i = 0; i < layout.size(); ++i)
        if (i != bias) weights[i] = normal(layout[i].shape, rng, 0.0f, 0.4f);  // the bias stays zero, as init's
    if (c.aimed_tokens) aim_router(weights[router]);

    OptimizerConfig adamw;
    adamw.weight_decay = c.weight_decay;
    // The peak lr must be > 0; mean_tie steps at lr 0 (its router stays where it was aimed).
    StageOptimizer optimizer(adamw, DelayFixConfig{}, layout, 1e-2, Device::cpu, c.moe.bias_update_rate);
    CpuOps ops;
    TensorSet grads = TensorSet::zeros(layout);
    Microbatch batch;  // the MoE layer reads only its input's rows
    batch.batch_size = 1;
    batch.seq_len = c.tokens;
    for (int64_t s = 0; s < c.steps; ++s) {
        const std::string step_dir = fmt::format("{}/step{}", dir, s);
        std::filesystem::create_directories(step_dir);
        write_tensor(step_dir + "/router.f32", weights[router]);
        write_tensor(step_dir + "/bias.f32", weights[bias]);
        grads.zero();
        for (int64_t m = 0; m < c.microbatches; ++m) {
            // drift: a shared offset in every token makes a few experts popular from the start.
            const Tensor h = c.aimed_tokens ? aimed_tokens(c.tokens) : normal({c.tokens, kHidden}, rng, 0.5f, 1.0f);
            const Tensor R = normal({c.tokens, kHidden}, rng, 0.0f, 1.0f);
            LayerContext ctx{ops, weights, &grads, batch};
            MoeSaved stash;
            moe.forward(ctx, h, moe.expert_bias(weights), &stash);
            moe.backward(ctx, R, 1.0f, stash);
            const std::string mb = fmt::format("{}/mb{}.", step_dir, m);
            write_tensor(mb + "h.f32", h);
            write_tensor(mb + "probs.f32", stash.probs);
            write_tensor(mb + "topk_expert.i32", stash.topk_expert);
        }
        write_tensor(step_dir + "/loads.f32", grads[bias]);
        optimizer.step(ops, layout, weights, grads, c.lr);
    }
    write_tensor(dir + "/final_bias.f32", weights[bias]);
    oracle::write_text(dir + "/manifest.json",
               fmt::format("{{\"case\": \"{}\", \"tokens\": {}, \"hidden_size\": {}, \"num_experts\": {}, "
                           "\"topk\": {}, \"microbatches\": {}, \"steps\": {}, \"rate\": {:.9g}, "
                           "\"aimed_tokens\": {}}}\n",
                           c.name, c.tokens, kHidden, c.moe.num_experts, c.moe.topk, c.microbatches, c.steps,
                           c.moe.bias_update_rate, c.aimed_tokens));
}

}  // namespace

int main(int argc, char** argv) {
    return nb::oracle::dump_cases_main("dump_moe_bias", argc, argv, cases(), 777, dump_case);
}

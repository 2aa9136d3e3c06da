// dump_moe_layer --workdir DIR: one forward/backward of the MoE feed-forward (model/moe_layer.h) on the CPU per
// case, written to DIR/<case>/ for tests/oracle/test_moe_layer.py to check against an independent float64 MoE in
// torch.
//
// Objective: L = sum(out * R) + L_aux (R random; daux_loss = 1), so every gradient carries both terms.
// Cases (N tokens, d = 16, per-expert f = 8):
//   basic        E 4, k 2, shared expert 12, coeff 0.1
//   tie          E 4, k 1, router rows 1 and 2 equal and large: their probabilities tie exactly, the lower index
//                (1) wins every such tie, and expert 2 receives no token
//   bias         E 6, k 2, renorm, shared expert, expert bias [.01, -.02, 0, 5, -5, .03]: expert 3 is chosen by
//                every token and expert 4 by none, while the gates stay the unbiased probabilities
//   k_equals_e   E 3, k 3, a small expert bias (it orders the slots only)
//   k_equals_e_renorm   E 3, k 3, renorm, shared expert
//
// Files in DIR/<case>/ (raw little-endian; float32 unless named .i32):
//   manifest.json                     the config, the aux loss, the parameter list, and checks done here
//   h.f32 [N,d], R.f32 [N,d], bias.f32 [E] (zeros when the case has none), out.f32 [N,d], dh.f32 [N,d]
//   probs.f32 [N,E], topk_expert.i32 [N,k], expert_offsets.i32 [E+1]
//   w.<name>.f32, g.<name>.f32        each parameter and its gradient, canonical order
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "model/moe_layer.h"
#include "src/cpu/cpu_ops.h"

#include "tests/oracle/dump_files.h"

using namespace nb;
using nb::oracle::write_raw;
using nb::oracle::write_text;

namespace {

constexpr int64_t kHidden = 16;

struct Case {
    std::string name;
    int64_t tokens;
    MoeConfig moe;
    std::vector<float> bias;  // empty: no expert bias
    bool tie_router_rows = false;
};

std::vector<Case> cases() {
    std::vector<Case> all;
    all.push_back({"basic", 12, {.num_experts = 4, .topk = 2, .ffn_hidden_size = 8, .shared_ffn_hidden_size = 12,
                                 .aux_loss_coeff = 0.1, .topk_renorm = false}, {}});
    all.push_back({"tie", 10, {.num_experts = 4, .topk = 1, .ffn_hidden_size = 8, .shared_ffn_hidden_size = 0,
                               .aux_loss_coeff = 0.5, .topk_renorm = false}, {}, true});
    all.push_back({"bias", 12, {.num_experts = 6, .topk = 2, .ffn_hidden_size = 8, .shared_ffn_hidden_size = 12,
                                .aux_loss_coeff = 0.1, .topk_renorm = true},
                   {0.01f, -0.02f, 0.0f, 5.0f, -5.0f, 0.03f}});
    all.push_back({"k_equals_e", 9, {.num_experts = 3, .topk = 3, .ffn_hidden_size = 8, .shared_ffn_hidden_size = 0,
                                     .aux_loss_coeff = 0.2, .topk_renorm = false}, {0.02f, -0.01f, 0.03f}});
    all.push_back({"k_equals_e_renorm", 9, {.num_experts = 3, .topk = 3, .ffn_hidden_size = 8,
                                            .shared_ffn_hidden_size = 12, .aux_loss_coeff = 0.2, .topk_renorm = true},
                   {}});
    return all;
}

void write_tensor(const std::string& dir, const std::string& file, const Tensor& t) {
    write_raw(dir + "/" + file, t.data(), t.bytes());
}

Tensor normal(const Shape& shape, std::mt19937& rng, float stddev) {
    Tensor t = Tensor::zeros(shape);
    std::normal_distribution<float> dist(0.0f, stddev);
    for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = dist(rng);
    return t;
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
    return a.bytes() == b.bytes() && std::memcmp(a.data(), b.data(), a.bytes()) == 0;
}

std::string json_shape(const Shape& s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

void dump_case(const Case& c, const std::string& dir, uint64_t seed) {
    std::filesystem::create_directories(dir);
    std::mt19937 rng(static_cast<uint32_t>(seed));
    ParamLayout layout;
    const MoeFeedForward moe(kHidden, c.moe, "layers.0.moe", layout);
    TensorSet weights = TensorSet::zeros(layout);
    for (int i = 0; i < layout.size(); ++i) weights[i] = normal(layout[i].shape, rng, 0.4f);
    const int router = layout.index_of("layers.0.moe.router.weight");
    if (c.tie_router_rows) {
        // Rows 1 and 2 equal (and scaled up so that they are often the best): every token's logits 1 and 2 are
        // the same products in the same order, so their probabilities tie exactly.
        float* wr = weights[router].f32();
        for (int64_t j = 0; j < kHidden; ++j) wr[kHidden + j] = wr[2 * kHidden + j] = 3.0f * wr[kHidden + j];
    }
    const int64_t N = c.tokens, E = c.moe.num_experts;
    const Tensor h = normal({N, kHidden}, rng, 1.0f), R = normal({N, kHidden}, rng, 1.0f);
    Tensor bias = Tensor::zeros({E});
    if (!c.bias.empty()) std::memcpy(bias.f32(), c.bias.data(), c.bias.size() * sizeof(float));
    const Tensor bias_in = c.bias.empty() ? Tensor{} : bias;

    CpuOps ops;
    Microbatch batch;  // the MoE layer reads only its input's rows
    batch.batch_size = 1;
    batch.seq_len = N;
    TensorSet grads = TensorSet::zeros(layout);
    LayerContext ctx{ops, weights, &grads, batch};
    MoeSaved stash;
    const MoeOutput fwd = moe.forward(ctx, h, bias_in, &stash);
    const Tensor dh = moe.backward(ctx, R, 1.0f, stash);

    // Determinism: a second pass gives the same bits.
    TensorSet grads2 = TensorSet::zeros(layout);
    LayerContext ctx2{ops, weights, &grads2, batch};
    MoeSaved stash2;
    const MoeOutput fwd2 = moe.forward(ctx2, h, bias_in, &stash2);
    const Tensor dh2 = moe.backward(ctx2, R, 1.0f, stash2);
    bool same = bitwise_equal(fwd.out, fwd2.out) && bitwise_equal(fwd.aux_loss, fwd2.aux_loss) &&
                bitwise_equal(dh, dh2);
    for (int i = 0; i < layout.size(); ++i) same = same && bitwise_equal(grads[i], grads2[i]);

    write_tensor(dir, "h.f32", h);
    write_tensor(dir, "R.f32", R);
    write_tensor(dir, "bias.f32", bias);
    write_tensor(dir, "out.f32", fwd.out);
    write_tensor(dir, "dh.f32", dh);
    write_tensor(dir, "probs.f32", stash.probs);
    write_tensor(dir, "topk_expert.i32", stash.topk_expert);
    write_tensor(dir, "expert_offsets.i32", fwd.expert_offsets);
    std::vector<std::string> params;
    const std::vector<oracle::ParamFiles> files = oracle::write_param_files(dir, layout, weights, grads);
    for (int i = 0; i < layout.size(); ++i) {
        const ParamInfo& p = layout[i];
        params.push_back(fmt::format(R"(    {{"name": "{}", "shape": {}, "weight": "{}", "grad": "{}"}})", p.name,
                                     json_shape(p.shape), files[i].weight, files[i].grad));
    }
    const std::string manifest = fmt::format(
        "{{\n"
        "  \"case\": \"{}\",\n"
        "  \"tokens\": {}, \"hidden_size\": {}, \"num_experts\": {}, \"topk\": {}, \"ffn_hidden_size\": {},\n"
        "  \"shared_ffn_hidden_size\": {}, \"aux_loss_coeff\": {:.17g}, \"topk_renorm\": {}, \"expert_bias\": {},\n"
        "  \"aux_loss\": {:.9g},\n"
        "  \"deterministic\": {},\n"
        "  \"params\": [\n{}\n  ]\n"
        "}}\n",
        c.name, N, kHidden, E, c.moe.topk, c.moe.ffn_hidden_size, c.moe.shared_ffn_hidden_size, c.moe.aux_loss_coeff,
        c.moe.topk_renorm, !c.bias.empty(), fwd.aux_loss.f32()[0], same, fmt::join(params, ",\n"));
    write_text(dir + "/manifest.json", manifest);
}

}  // namespace

int main(int argc, char** argv) {
    return nb::oracle::dump_cases_main("dump_moe_layer", argc, argv, cases(), 4242, dump_case);
}

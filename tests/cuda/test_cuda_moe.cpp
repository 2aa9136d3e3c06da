// The CUDA MoE ops (cuda/moe_*.cu) against the f32 CPU reference (src/cpu/moe_*.cpp), op by op, then the whole
// MoeFeedForward layer.
//
// Pattern (tests/cuda/cuda_test_util.h): inputs rounded to bf16 first, so both backends see the same values;
// every accumulated (+=) output starts from the same nonzero values on both sides, every written-only output
// starts from garbage on the GPU, so a lost += or a missed element shows.
//
// What must agree exactly, and why:
// - the selection (topk_expert) wherever no two scores are within rounding of each other: the tests build
//   such inputs, and exact ties (equal logits give equal probabilities on either backend, bit for bit), which
//   must go to the lower expert index on both;
// - the dispatch plan (integers: the same stable counting sort), the permutation (a bf16 copy), the permute
//   backward (the CPU's f32 sum in the same order, rounded once to bf16) and the bias update (exact signs);
// - the aux loss's gradient (the same double expression per expert, then one f32 add).
// Tolerances elsewhere (u = 2^-24): probabilities and gates 64 u relative (CUDA's expf errs by <= 2 ulps, the
// CPU's by < 1, carried into the double total; then the division, a renorm's second division and the roundings:
// <= ~30 u together, doubled); bf16 outputs the bf16 rounding (kBf16Rtol, as
// test_cuda_layers_ops.cpp) plus a small atol for values that cancel; GEMMs the Higham bound of
// test_cuda_basic.cpp's linear test, from the CPU's product of |inputs|. A wrong index or a lost term makes
// errors of the size of the values themselves, far above all of these.
#include "tests/cuda/cuda_test_main.h"
#include "tests/cuda/cuda_test_util.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/moe_layer.h"
#include "model/params.h"
#include "src/core/rng.h"

namespace {

constexpr double kU = 0x1p-24;      // f32 unit roundoff
constexpr double kBf16Rtol = 1e-2;  // one bf16 rounding (2^-8) with room for f32 differences
constexpr double kProbRtol = 64 * kU;  // see the header

// A host f32 tensor of the given values.
Tensor f32_host(const Shape& shape, const std::vector<float>& values) {
    Tensor t = Tensor::zeros(shape, DType::f32, Device::cpu);
    REQUIRE(static_cast<size_t>(t.numel()) == values.size());
    std::copy(values.begin(), values.end(), t.f32());
    return t;
}

// A GPU i32 tensor of `shape` filled with a value no op writes (so an unwritten element shows).
Tensor i32_garbage(const Shape& shape) {
    Tensor t = Tensor::zeros(shape, DType::i32, Device::cpu);
    std::fill(t.i32(), t.i32() + t.numel(), 77777);
    return t.to(Device::cuda);
}

// Each token's k distinct experts, drawn at random from `allowed` (so an expert left out receives no token).
Tensor random_topk(int64_t tokens, int64_t k, const std::vector<int32_t>& allowed, uint64_t seed) {
    REQUIRE(static_cast<int64_t>(allowed.size()) >= k);
    Tensor t = Tensor::zeros({tokens, k}, DType::i32, Device::cpu);
    Rng rng(seed);
    std::vector<int32_t> pool = allowed;
    for (int64_t n = 0; n < tokens; ++n) {
        for (int64_t j = 0; j < k; ++j) {  // a partial Fisher-Yates shuffle: the first k of a permutation
            const int64_t pick = j + static_cast<int64_t>(rng.below(static_cast<uint64_t>(pool.size() - j)));
            std::swap(pool[static_cast<size_t>(j)], pool[static_cast<size_t>(pick)]);
            t.i32()[n * k + j] = pool[static_cast<size_t>(j)];
        }
    }
    return t;
}

std::vector<int32_t> iota_experts(int64_t experts) {
    std::vector<int32_t> all(static_cast<size_t>(experts));
    std::iota(all.begin(), all.end(), 0);
    return all;
}

// The CPU's dispatch plan of topk_expert [N,k] over E experts (host i32 tensors).
struct Plan {
    Tensor pair_of_row, row_of_pair, offsets;
};
Plan cpu_plan(CpuOps& cpu, const Tensor& topk_expert, int64_t experts) {
    const int64_t pairs = topk_expert.numel();
    Plan p{Tensor::zeros({pairs}, DType::i32), Tensor::zeros({pairs}, DType::i32),
           Tensor::zeros({experts + 1}, DType::i32)};
    cpu.moe_dispatch_plan(p.pair_of_row, p.row_of_pair, p.offsets, topk_expert);
    return p;
}

Tensor scaled(const Tensor& host_f32, double c) {
    Tensor t = host_f32.clone();
    for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = static_cast<float>(c * t.f32()[i]);
    return t;
}

std::vector<int32_t> ints_of(const Tensor& t) {
    const Tensor host = t.to(Device::cpu);
    return {host.i32(), host.i32() + host.numel()};
}

}  // namespace

// ---- router ----

namespace {

struct RouterCase {
    const char* what;
    Tensor logits;  // host f32, bf16-representable
    int64_t k;
    Tensor bias;  // host f32 or undefined
    bool renorm;
};

// Runs the router forward on both backends and compares; returns the GPU's topk_expert on the host.
std::vector<int32_t> check_router_forward(const RouterCase& rc, uint64_t seed) {
    INFO(rc.what);
    CudaOps& gpu = cuda_ops();
    CpuOps cpu;
    const int64_t n = rc.logits.dim(0), e = rc.logits.dim(1);
    Tensor probs_ref = Tensor::zeros({n, e}), expert_ref = Tensor::zeros({n, rc.k}, DType::i32);
    Tensor gate_ref = Tensor::zeros({n, rc.k});
    cpu.moe_router_forward(probs_ref, expert_ref, gate_ref, rc.logits, rc.bias, rc.renorm);

    Tensor probs = to_cuda_f32(randn_host({n, e}, seed), gpu), gate = to_cuda_f32(randn_host({n, rc.k}, seed + 1), gpu);
    Tensor expert = i32_garbage({n, rc.k});
    const Tensor bias = rc.bias.defined() ? to_cuda_f32(rc.bias, gpu) : Tensor{};
    gpu.moe_router_forward(probs, expert, gate, to_cuda_bf16(rc.logits, gpu), bias, rc.renorm);
    check_bitwise_equal(expert, expert_ref, "router topk_expert");
    check_close(probs, probs_ref, 1e-30, kProbRtol, "router probs");
    check_close(gate, gate_ref, 1e-30, kProbRtol, "router topk_gate");
    return ints_of(expert);
}

}  // namespace

TEST_CASE("moe router forward: selection, ties to the lower index, bias selects, renorm, k = E") {
    // Random logits (bf16 values, so distinct logits differ by >= 2^-8 relative and their probabilities by far
    // more than rounding): 300 tokens span three blocks of 128.
    Tensor random_logits = bf16_randn({300, 8}, 11, 2.0f);
    for (bool renorm : {false, true}) check_router_forward({"random, top-2 of 8", random_logits, 2, {}, renorm}, 20);
    check_router_forward({"k = E = 8, renorm", random_logits, 8, {}, true}, 21);
    check_router_forward({"top-3 of 40 (E > 32)", bf16_randn({130, 40}, 12, 2.0f), 3, {}, false}, 22);

    // Exact ties: a row of zeros (all 6 equal), two equal maxima, and equal runners-up.
    const Tensor ties = f32_host({3, 6}, {0, 0, 0, 0, 0, 0,  //
                                          0, 0, 5, 0, 5, 0,  //
                                          1, 3, 3, 0, 3, 1});
    const std::vector<int32_t> tie_experts = check_router_forward({"exact ties", ties, 3, {}, false}, 23);
    CHECK(tie_experts == std::vector<int32_t>{0, 1, 2, /**/ 2, 4, 0, /**/ 1, 2, 4});

    // The bias selects, the gates stay p: biases 2 apart outweigh any difference of probabilities, so every
    // token picks experts 3, 1 (the largest biases) first; experts 0 and 2 have equal biases and equal logits
    // (column 2 is a copy of column 0), an exact tie of scores, which goes to the lower index, 0.
    const Tensor bias = f32_host({4}, {2.0f, 4.0f, 2.0f, 6.0f});
    Tensor tied_columns = bf16_randn({50, 4}, 13, 2.0f);
    for (int64_t n = 0; n < 50; ++n) tied_columns.f32()[n * 4 + 2] = tied_columns.f32()[n * 4];
    const std::vector<int32_t> biased =
        check_router_forward({"bias selects", tied_columns, 3, bias, false}, 24);
    for (int64_t n = 0; n < 50; ++n) {
        CHECK(biased[static_cast<size_t>(n * 3)] == 3);
        CHECK(biased[static_cast<size_t>(n * 3 + 1)] == 1);
        CHECK(biased[static_cast<size_t>(n * 3 + 2)] == 0);
    }
}

TEST_CASE("moe router backward matches the CPU (dprobs present or not, renorm or not, k = E)") {
    CudaOps& gpu = cuda_ops();
    CpuOps cpu;
    struct Case {
        int64_t n, e, k;
        bool renorm, with_dprobs;
    };
    uint64_t seed = 40;
    for (const Case& c : {Case{300, 8, 2, false, true}, Case{300, 8, 2, true, true}, Case{129, 8, 2, true, false},
                          Case{64, 6, 6, true, true}, Case{64, 6, 6, false, false}}) {
        CAPTURE(c.n);
        CAPTURE(c.k);
        CAPTURE(c.renorm);
        CAPTURE(c.with_dprobs);
        const Tensor logits = bf16_randn({c.n, c.e}, seed++, 2.0f);
        Tensor probs = Tensor::zeros({c.n, c.e}), expert = Tensor::zeros({c.n, c.k}, DType::i32);
        Tensor gate = Tensor::zeros({c.n, c.k});
        cpu.moe_router_forward(probs, expert, gate, logits, {}, c.renorm);
        const Tensor dprobs = c.with_dprobs ? randn_host({c.n, c.e}, seed++) : Tensor{};
        const Tensor dgate = randn_host({c.n, c.k}, seed++);
        const Tensor dlogits0 = bf16_randn({c.n, c.e}, seed++);
        Tensor dlogits_ref = dlogits0.clone();
        cpu.moe_router_backward(dlogits_ref, dprobs, dgate, probs, expert, gate, c.renorm);

        // The same saved tensors (the CPU's) on the GPU, so this tests backward alone.
        Tensor dlogits = to_cuda_bf16(dlogits0, gpu);
        const Tensor dprobs_d = c.with_dprobs ? to_cuda_f32(dprobs, gpu) : Tensor{};
        gpu.moe_router_backward(dlogits, dprobs_d, to_cuda_f32(dgate, gpu), to_cuda_f32(probs, gpu),
                                to_cuda(expert, gpu), to_cuda_f32(gate, gpu), c.renorm);
        // The double arithmetic is the CPU's, in the CPU's order (up to FMA contraction, ~1e-16); what remains
        // is the bf16 rounding of dlogits (the CPU keeps f32), and near zero the f32 add's rounding.
        check_close(dlogits, dlogits_ref, 1e-5, kBf16Rtol, "router dlogits");

        Tensor again = to_cuda_bf16(dlogits0, gpu);
        gpu.moe_router_backward(again, dprobs_d, to_cuda_f32(dgate, gpu), to_cuda_f32(probs, gpu),
                                to_cuda(expert, gpu), to_cuda_f32(gate, gpu), c.renorm);
        check_bitwise_equal(again, dlogits, "router dlogits, two runs");
    }
}

// ---- aux loss ----

TEST_CASE("moe aux loss forward and backward match the CPU (an expert without tokens)") {
    CudaOps& gpu = cuda_ops();
    CpuOps cpu;
    // 300 tokens: two chunks of the GPU's column sums; expert 5 of 8 receives nothing (f_5 = 0).
    for (int64_t n : {int64_t{300}, int64_t{7}}) {
        CAPTURE(n);
        const int64_t e = 8, k = 2;
        const Tensor topk = random_topk(n, k, {0, 1, 2, 3, 4, 6, 7}, 50 + n);
        const Plan plan = cpu_plan(cpu, topk, e);
        Tensor probs = Tensor::zeros({n, e}), unused_expert = Tensor::zeros({n, k}, DType::i32);
        Tensor unused_gate = Tensor::zeros({n, k});
        cpu.moe_router_forward(probs, unused_expert, unused_gate, bf16_randn({n, e}, 60 + n), {}, false);
        const float coeff = 0.01f;

        Tensor loss_ref = Tensor::zeros({1});
        cpu.moe_aux_loss_forward(loss_ref, probs, plan.offsets, coeff);
        Tensor loss = to_cuda_f32(f32_host({1}, {-123.0f}), gpu);
        const Tensor offsets = to_cuda(plan.offsets, gpu), probs_d = to_cuda_f32(probs, gpu);
        gpu.moe_aux_loss_forward(loss, probs_d, offsets, coeff);
        // Double sums grouped differently (chunks of 256 tokens), then one f32 rounding: within 2 f32 ulps.
        check_close(loss, loss_ref, 0.0, 4 * kU, "aux loss");
        CHECK(loss_ref.f32()[0] > 0.0f);

        const Tensor dprobs0 = randn_host({n, e}, 70 + n);
        Tensor dprobs_ref = dprobs0.clone();
        cpu.moe_aux_loss_backward(dprobs_ref, plan.offsets, coeff, 0.5f);
        Tensor dprobs = to_cuda_f32(dprobs0, gpu);
        gpu.moe_aux_loss_backward(dprobs, offsets, coeff, 0.5f);
        // The same double expression per expert, rounded once, added once: the same bits.
        check_bitwise_equal(dprobs, dprobs_ref, "aux loss dprobs");
    }
}

// ---- dispatch plan and permutation ----

TEST_CASE("moe dispatch plan is the CPU's, bit for bit (empty expert, one expert for all, k = E, E > 256)") {
    CudaOps& gpu = cuda_ops();
    CpuOps cpu;
    struct Case {
        const char* what;
        Tensor topk;
        int64_t experts;
    };
    Tensor all_to_three = Tensor::zeros({700, 1}, DType::i32);
    std::fill(all_to_three.i32(), all_to_three.i32() + 700, 3);
    const Case cases[] = {
        // 2000 pairs: 7 full chunks of 256 and a partial one; expert 5 receives nothing.
        {"top-2 of 8, expert 5 empty", random_topk(1000, 2, {0, 1, 2, 3, 4, 6, 7}, 80), 8},
        {"every token to expert 3 of 4", all_to_three, 4},
        {"k = E = 8", random_topk(300, 8, iota_experts(8), 81), 8},
        {"top-3 of 300 (more experts than threads)", random_topk(500, 3, iota_experts(300), 82), 300},
        {"one token", random_topk(1, 2, iota_experts(4), 83), 4},
    };
    for (const Case& c : cases) {
        INFO(c.what);
        const Plan ref = cpu_plan(cpu, c.topk, c.experts);
        const int64_t pairs = c.topk.numel();
        Tensor pair_of_row = i32_garbage({pairs}), row_of_pair = i32_garbage({pairs});
        Tensor offsets = i32_garbage({c.experts + 1});
        gpu.moe_dispatch_plan(pair_of_row, row_of_pair, offsets, to_cuda(c.topk, gpu));
        check_bitwise_equal(offsets, ref.offsets, "expert_offsets");
        check_bitwise_equal(pair_of_row, ref.pair_of_row, "pair_of_row");
        check_bitwise_equal(row_of_pair, ref.row_of_pair, "row_of_pair");
    }
}

TEST_CASE("moe permute forward and backward: exact copies and the CPU's sums rounded once") {
    CudaOps& gpu = cuda_ops();
    CpuOps cpu;
    for (int64_t k : {int64_t{2}, int64_t{8}}) {
        CAPTURE(k);
        const int64_t n = 333, d = 72, e = 8, rows = n * k;
        const Plan plan = cpu_plan(cpu, random_topk(n, k, iota_experts(e), 90 + k), e);
        const Tensor x = bf16_randn({n, d}, 91 + k);
        Tensor xp_ref = Tensor::zeros({rows, d});
        cpu.moe_permute_forward(xp_ref, x, plan.pair_of_row);
        Tensor xp = to_cuda_bf16(bf16_randn({rows, d}, 92 + k), gpu);
        gpu.moe_permute_forward(xp, to_cuda_bf16(x, gpu), to_cuda(plan.pair_of_row, gpu));
        check_close(xp, xp_ref, 0.0, 0.0, "permuted rows (a copy)");

        const Tensor dxp = bf16_randn({rows, d}, 93 + k), dx0 = bf16_randn({n, d}, 94 + k);
        Tensor dx_ref = dx0.clone();
        cpu.moe_permute_backward(dx_ref, dxp, plan.row_of_pair);
        round_to_bf16(dx_ref);  // the GPU adds in the same order in f32 and rounds the sum once
        Tensor dx = to_cuda_bf16(dx0, gpu);
        gpu.moe_permute_backward(dx, to_cuda_bf16(dxp, gpu), to_cuda(plan.row_of_pair, gpu));
        check_close(dx, dx_ref, 0.0, 0.0, "permute backward dx");
    }
}

// ---- combine ----

TEST_CASE("moe combine forward and backward match the CPU") {
    CudaOps& gpu = cuda_ops();
    CpuOps cpu;
    // 999 pairs (125 blocks of 8 warps, the last one partial); d = 100 is not a multiple of 32 lanes.
    const int64_t n = 333, k = 3, e = 5, d = 100, rows = n * k;
    const Plan plan = cpu_plan(cpu, random_topk(n, k, iota_experts(e), 100), e);
    const Tensor eout = bf16_randn({rows, d}, 101);
    Tensor gate = uniform_host({n, k}, 102, 0.0f, 1.0f);
    Tensor y_ref = Tensor::zeros({n, d});
    cpu.moe_combine_forward(y_ref, eout, gate, plan.row_of_pair);
    const Tensor eout_d = to_cuda_bf16(eout, gpu), gate_d = to_cuda_f32(gate, gpu);
    const Tensor row_of_pair = to_cuda(plan.row_of_pair, gpu);
    Tensor y = to_cuda_bf16(bf16_randn({n, d}, 103), gpu);
    gpu.moe_combine_forward(y, eout_d, gate_d, row_of_pair);
    // k = 3 f32 products summed (in slot order on both), then the bf16 rounding; atol for sums that cancel.
    check_close(y, y_ref, 1e-5, kBf16Rtol, "combine y");

    const Tensor dy = bf16_randn({n, d}, 104), dexp0 = bf16_randn({rows, d}, 105);
    const Tensor dgate0 = randn_host({n, k}, 106);
    Tensor dexp_ref = dexp0.clone(), dgate_ref = dgate0.clone();
    cpu.moe_combine_backward(dexp_ref, dgate_ref, dy, eout, gate, plan.row_of_pair);
    Tensor dexp = to_cuda_bf16(dexp0, gpu), dgate = to_cuda_f32(dgate0, gpu);
    gpu.moe_combine_backward(dexp, dgate, to_cuda_bf16(dy, gpu), eout_d, gate_d, row_of_pair);
    check_close(dexp, dexp_ref, 1e-5, kBf16Rtol, "combine dexpert_out");
    // dgate: a d-term dot in double on both sides (lane-strided on the GPU), rounded to f32 and added to the
    // prefill: 2 f32 roundings of |dgate0| + sum |dy eout|, computed by the CPU op on |inputs|.
    Tensor bound_dexp = abs_host(dexp0), bound = abs_host(dgate0);
    cpu.moe_combine_backward(bound_dexp, bound, abs_host(dy), abs_host(eout), gate, plan.row_of_pair);
    check_within(dgate, dgate_ref, scaled(bound, 4 * kU), 0.0, "combine dgate");

    Tensor dexp2 = to_cuda_bf16(dexp0, gpu), dgate2 = to_cuda_f32(dgate0, gpu);
    gpu.moe_combine_backward(dexp2, dgate2, to_cuda_bf16(dy, gpu), eout_d, gate_d, row_of_pair);
    check_bitwise_equal(dgate2, dgate, "combine dgate, two runs");
    check_bitwise_equal(dexp2, dexp, "combine dexpert_out, two runs");
}

// ---- grouped linear ----

namespace {

// Forward and backward of the grouped linear over `offsets` (host i32 [E+1]), against the CPU with the linear
// test's bound: 3 (k + 1) u sum |a b| per element (f32 sums in any order, tensor-core accumulation), and rtol
// 2^-8 on bf16 outputs.
void check_grouped_linear(const std::vector<int32_t>& offsets, int64_t in, int64_t out, uint64_t seed) {
    CudaOps& gpu = cuda_ops();
    CpuOps cpu;
    const int64_t experts = static_cast<int64_t>(offsets.size()) - 1, rows = offsets.back();
    CAPTURE(experts);
    CAPTURE(rows);
    const Tensor off = i32_host({experts + 1}, offsets), off_d = to_cuda(off, gpu);
    const Tensor x = bf16_randn({rows, in}, seed), dy = bf16_randn({rows, out}, seed + 1);
    const Tensor dx0 = bf16_randn({rows, in}, seed + 2);
    std::vector<Tensor> w, dw0, w_d, abs_w;
    for (int64_t e = 0; e < experts; ++e) {
        w.push_back(bf16_randn({out, in}, seed + 10 + e, 1.0f / std::sqrt(static_cast<float>(in))));
        dw0.push_back(randn_host({out, in}, seed + 100 + e));
        w_d.push_back(to_cuda_bf16(w.back(), gpu));
        abs_w.push_back(abs_host(w.back()));
    }
    auto ptrs = [](const std::vector<Tensor>& v) {
        std::vector<const Tensor*> p;
        for (const Tensor& t : v) p.push_back(&t);
        return p;
    };
    auto mut_ptrs = [](std::vector<Tensor>& v) {
        std::vector<Tensor*> p;
        for (Tensor& t : v) p.push_back(&t);
        return p;
    };

    Tensor y_ref = Tensor::zeros({rows, out}), s_y = Tensor::zeros({rows, out});
    cpu.moe_grouped_linear_forward(y_ref, x, ptrs(w), off);
    cpu.moe_grouped_linear_forward(s_y, abs_host(x), ptrs(abs_w), off);
    Tensor y = to_cuda_bf16(bf16_randn({rows, out}, seed + 3), gpu);
    gpu.moe_grouped_linear_forward(y, to_cuda_bf16(x, gpu), ptrs(w_d), off_d);
    check_within(y, y_ref, scaled(s_y, 3.0 * (in + 1) * kU), 0x1p-8, "grouped forward y");

    std::vector<Tensor> dw_ref, s_dw, dw_d;
    for (int64_t e = 0; e < experts; ++e) {
        dw_ref.push_back(dw0[static_cast<size_t>(e)].clone());
        s_dw.push_back(abs_host(dw0[static_cast<size_t>(e)]));
        dw_d.push_back(to_cuda_f32(dw0[static_cast<size_t>(e)], gpu));
    }
    Tensor dx_ref = dx0.clone(), s_dx = abs_host(dx0);
    cpu.moe_grouped_linear_backward(dx_ref, mut_ptrs(dw_ref), dy, x, ptrs(w), off);
    cpu.moe_grouped_linear_backward(s_dx, mut_ptrs(s_dw), abs_host(dy), abs_host(x), ptrs(abs_w), off);
    Tensor dx = to_cuda_bf16(dx0, gpu);
    const Tensor x_d = to_cuda_bf16(x, gpu), dy_d = to_cuda_bf16(dy, gpu);
    gpu.moe_grouped_linear_backward(dx, mut_ptrs(dw_d), dy_d, x_d, ptrs(w_d), off_d);
    check_within(dx, dx_ref, scaled(s_dx, 3.0 * (out + 1) * kU), 0x1p-8, "grouped backward dx");
    for (int64_t e = 0; e < experts; ++e) {
        const size_t i = static_cast<size_t>(e);
        const int64_t m = offsets[i + 1] - offsets[i];
        INFO("expert " << e << " with " << m << " rows");
        check_within(dw_d[i], dw_ref[i], scaled(s_dw[i], 3.0 * (m + 1) * kU), 0.0, "grouped backward dw");
        if (m == 0) check_bitwise_equal(dw_d[i], to_cuda_f32(dw0[i], gpu), "an expert without rows keeps its dw");
    }

    // dx undefined: only the weight gradients, the same bits as with dx.
    std::vector<Tensor> dw_again;
    for (int64_t e = 0; e < experts; ++e) dw_again.push_back(to_cuda_f32(dw0[static_cast<size_t>(e)], gpu));
    Tensor none;
    gpu.moe_grouped_linear_backward(none, mut_ptrs(dw_again), dy_d, x_d, ptrs(w_d), off_d);
    for (int64_t e = 0; e < experts; ++e)
        check_bitwise_equal(dw_again[static_cast<size_t>(e)], dw_d[static_cast<size_t>(e)], "dw, dx undefined");
}

}  // namespace

TEST_CASE("moe grouped linear forward and backward match the CPU (uneven experts, an empty one)") {
    CHECK_NOTHROW(check_grouped_linear({0, 37, 37, 137, 200}, 96, 40, 200));        // expert 1 has no row
    CHECK_NOTHROW(check_grouped_linear({0, 0, 1, 2, 3}, 8, 8, 300));                 // single rows, expert 0 empty
    CHECK_NOTHROW(check_grouped_linear({0, 260, 512, 700, 1024}, 128, 192, 400));   // tiny-moe-like shapes
    CHECK_NOTHROW(check_grouped_linear({0, 0, 0, 500}, 64, 72, 500));               // one expert takes every row
}

TEST_CASE("moe grouped linear rejects offsets that do not partition the rows") {
    CudaOps& gpu = cuda_ops();
    const Tensor x = gpu.activation({10, 8});
    Tensor y = gpu.activation({10, 4});
    const Tensor w0 = gpu.activation({4, 8}), w1 = gpu.activation({4, 8}), w2 = gpu.activation({4, 8});
    const std::vector<const Tensor*> w = {&w0, &w1, &w2};
    const Tensor decreasing = to_cuda(i32_host({4}, {0, 5, 3, 10}), gpu);
    const Tensor short_total = to_cuda(i32_host({4}, {0, 3, 5, 9}), gpu);
    CHECK_THROWS_AS(gpu.moe_grouped_linear_forward(y, x, w, decreasing), std::invalid_argument);
    CHECK_THROWS_AS(gpu.moe_grouped_linear_forward(y, x, w, short_total), std::invalid_argument);
    const Tensor x_f32 = gpu.f32_zeros({10, 8});
    const Tensor good = to_cuda(i32_host({4}, {0, 3, 5, 10}), gpu);
    CHECK_THROWS_AS(gpu.moe_grouped_linear_forward(y, x_f32, w, good), std::invalid_argument);
}

// ---- expert bias update ----

TEST_CASE("moe expert bias update is the CPU's, bit for bit") {
    CudaOps& gpu = cuda_ops();
    CpuOps cpu;
    const float rate = 1e-3f;
    // Loads summing to 32 over 8 experts: mean 4, so the signs are +, -, 0, 0, +, -, 0, +.
    const Tensor load = f32_host({8}, {3, 5, 4, 4, 0, 12, 4, 0});
    const Tensor bias0 = randn_host({8}, 110, 0.1f);
    Tensor bias_ref = bias0.clone();
    cpu.moe_expert_bias_update(bias_ref, load, rate);
    const float sign[8] = {1, -1, 0, 0, 1, -1, 0, 1};
    for (int i = 0; i < 8; ++i) CHECK(bias_ref.f32()[i] == bias0.f32()[i] + rate * sign[i]);
    Tensor bias = to_cuda_f32(bias0, gpu);
    gpu.moe_expert_bias_update(bias, to_cuda_f32(load, gpu), rate);
    check_bitwise_equal(bias, bias_ref, "expert bias, 8 experts");

    // 300 experts (more than the block's threads), a mean that is not an integer.
    Tensor many_loads = Tensor::zeros({300});
    Rng rng(111);
    for (int64_t i = 0; i < 300; ++i) many_loads.f32()[i] = static_cast<float>(rng.below(20));
    const Tensor many0 = randn_host({300}, 112, 0.1f);
    Tensor many_ref = many0.clone();
    cpu.moe_expert_bias_update(many_ref, many_loads, rate);
    Tensor many = to_cuda_f32(many0, gpu);
    gpu.moe_expert_bias_update(many, to_cuda_f32(many_loads, gpu), rate);
    check_bitwise_equal(many, many_ref, "expert bias, 300 experts");
}

TEST_CASE("moe expert load accumulate is the CPU's, bit for bit") {
    CudaOps& gpu = cuda_ops();
    CpuOps cpu;
    // Two microbatches' offsets into one step's load: an expert with no pair, one with every pair of the first.
    const Tensor first = i32_host({5}, {0, 0, 12, 12, 12}), second = i32_host({5}, {0, 3, 5, 9, 12});
    Tensor load_ref = f32_host({4}, {1, 2, 3, 4});
    cpu.moe_expert_load_accumulate(load_ref, first);
    cpu.moe_expert_load_accumulate(load_ref, second);
    const float want[4] = {1 + 0 + 3, 2 + 12 + 2, 3 + 0 + 4, 4 + 0 + 3};
    for (int i = 0; i < 4; ++i) CHECK(load_ref.f32()[i] == want[i]);
    Tensor load = to_cuda_f32(f32_host({4}, {1, 2, 3, 4}), gpu);
    gpu.moe_expert_load_accumulate(load, to_cuda(first, gpu));
    gpu.moe_expert_load_accumulate(load, to_cuda(second, gpu));
    check_bitwise_equal(load, load_ref, "expert load, 4 experts");

    // 300 experts (more than one block of threads).
    std::vector<int32_t> offsets(301, 0);
    Rng rng(113);
    for (int64_t e = 0; e < 300; ++e) offsets[e + 1] = offsets[e] + static_cast<int32_t>(rng.below(7));
    const Tensor many_off = i32_host({301}, offsets);
    Tensor many_ref = Tensor::zeros({300});
    cpu.moe_expert_load_accumulate(many_ref, many_off);
    Tensor many = gpu.f32_zeros({300});
    gpu.moe_expert_load_accumulate(many, to_cuda(many_off, gpu));
    check_bitwise_equal(many, many_ref, "expert load, 300 experts");
}

// ---- argument checks ----

TEST_CASE("moe ops reject wrong dtypes") {
    CudaOps& gpu = cuda_ops();
    Tensor probs = gpu.f32_zeros({4, 8}), gate = gpu.f32_zeros({4, 2}), expert = gpu.zeros({4, 2}, DType::i32);
    const Tensor logits_bf16 = gpu.activation({4, 8}), logits_f32 = gpu.f32_zeros({4, 8});
    CHECK_NOTHROW(gpu.moe_router_forward(probs, expert, gate, logits_bf16, {}, false));
    CHECK_THROWS_AS(gpu.moe_router_forward(probs, expert, gate, logits_f32, {}, false), std::invalid_argument);
    Tensor probs_bf16 = gpu.activation({4, 8});
    CHECK_THROWS_AS(gpu.moe_router_forward(probs_bf16, expert, gate, logits_bf16, {}, false), std::invalid_argument);
    Tensor x_f32 = gpu.f32_zeros({4, 16}), xp = gpu.activation({8, 16});
    const Tensor pair_of_row = gpu.zeros({8}, DType::i32);
    CHECK_THROWS_AS(gpu.moe_permute_forward(xp, x_f32, pair_of_row), std::invalid_argument);
    Tensor bias_bf16 = gpu.activation({8});
    CHECK_THROWS_AS(gpu.moe_expert_bias_update(bias_bf16, gpu.f32_zeros({8}), 1e-3f), std::invalid_argument);
    Tensor bias = gpu.f32_zeros({8});
    CHECK_THROWS_AS(gpu.moe_expert_bias_update(bias, gpu.f32_zeros({7}), 1e-3f), std::invalid_argument);
}

// ---- the whole layer ----

namespace {

// MoeFeedForward on both backends from the same weights. The router's logits are made exact in bf16 (below), so
// both backends pick the same experts; everything after is compared at bf16 precision, as the whole-model test
// (test_cuda_model.cpp): relative Frobenius error <= 5% per tensor (a chain of ~6 bf16 roundings, each <= 0.4%,
// and the softmax backward's p (dp - p.dp) can cancel for a peaked router), while a wrong index or a lost term
// errs by order 1.
void check_moe_layer(const MoeConfig& config, const Tensor& bias_host, uint64_t seed) {
    CudaOps& gpu = cuda_ops();
    CpuOps cpu;
    const int64_t d = 64, n = 96, experts = config.num_experts;
    ParamLayout layout;
    const MoeFeedForward moe(d, config, "layers.0.moe", layout);
    TensorSet weights = TensorSet::zeros(layout);
    for (int i = 0; i < layout.size(); ++i) {
        Tensor& t = weights[i];
        const float stddev = 1.0f / std::sqrt(static_cast<float>(t.dim(1)));
        const Tensor r = bf16_randn(t.shape(), seed + static_cast<uint64_t>(i), stddev);
        std::memcpy(t.data(), r.data(), t.bytes());
    }
    // layers.0.moe.router.weight [E, d]: only columns 0 and 1, small integers; h[:, 0:2] integers in [-3, 3].
    // The logits are integers of at most 5 bits, exact in bf16 and in any f32 summation order: both backends
    // get the same logits, so the same probabilities up to rounding (the order of unequal ones kept, since they
    // differ by a factor e or more) and bit-equal probabilities for equal logits (exact ties, lower index).
    Tensor& router = weights[0];
    REQUIRE(layout[0].name == "layers.0.moe.router.weight");
    std::fill(router.f32(), router.f32() + router.numel(), 0.0f);
    for (int64_t e = 0; e < experts; ++e) {
        router.f32()[e * d] = static_cast<float>(1 - e % 3);
        router.f32()[e * d + 1] = static_cast<float>(e % 4 - 1);
    }
    Tensor h = bf16_randn({n, d}, seed + 1000);
    Rng rng(seed + 1001);
    for (int64_t t = 0; t < n; ++t)
        for (int64_t c = 0; c < 2; ++c)
            h.f32()[t * d + c] = static_cast<float>(static_cast<int64_t>(rng.below(7)) - 3);
    const Tensor dout = bf16_randn({n, d}, seed + 1002);
    const Microbatch none_batch{};

    TensorSet cpu_grads = TensorSet::zeros(layout);
    LayerContext cpu_ctx{cpu, weights, &cpu_grads, none_batch};
    MoeSaved cpu_stash;
    const MoeOutput cpu_out = moe.forward(cpu_ctx, h, bias_host, &cpu_stash);
    const Tensor cpu_dh = moe.backward(cpu_ctx, dout, 1.0f, cpu_stash);

    const TensorSet compute = make_compute_weights(gpu, layout, weights.to(Device::cuda));
    TensorSet gpu_grads = TensorSet::zeros(layout, DType::f32, Device::cuda);
    LayerContext gpu_ctx{gpu, compute, &gpu_grads, none_batch};
    MoeSaved gpu_stash;
    const Tensor bias_d = bias_host.defined() ? to_cuda_f32(bias_host, gpu) : Tensor{};
    const MoeOutput gpu_out = moe.forward(gpu_ctx, to_cuda_bf16(h, gpu), bias_d, &gpu_stash);
    const Tensor gpu_dh = moe.backward(gpu_ctx, to_cuda_bf16(dout, gpu), 1.0f, gpu_stash);

    check_bitwise_equal(gpu_stash.topk_expert, cpu_stash.topk_expert, "the same experts (stash: topk_expert)");
    check_bitwise_equal(gpu_out.expert_offsets, cpu_out.expert_offsets, "the same expert offsets");
    check_close(gpu_out.aux_loss, cpu_out.aux_loss, 1e-12, 1e-5, "aux loss");
    CHECK(relative_frobenius(gpu_out.out, cpu_out.out) <= 0.05);
    CHECK(relative_frobenius(gpu_dh, cpu_dh) <= 0.05);
    for (int i = 0; i < layout.size(); ++i) {
        const double err = relative_frobenius(gpu_grads[i], cpu_grads[i]);
        INFO(layout[i].name << ": relative Frobenius error " << err);
        CHECK(err <= 0.05);
    }
}

}  // namespace

TEST_CASE("MoeFeedForward on CUDA matches the CPU: output, aux loss, input and every parameter gradient") {
    // top-2 of 8 with a shared expert and the aux loss; rows with h[:, 0:2] = 0 tie all experts (-> 0, 1), others
    // tie some.
    CHECK_NOTHROW(check_moe_layer({8, 2, 48, 32, 0.01, false}, {}, 120));
    // k = E = 4 with renorm, a bias that reorders the slots (2 apart: it alone decides the order), no shared expert.
    CHECK_NOTHROW(check_moe_layer({4, 4, 40, 0, 0.1, true}, f32_host({4}, {2, 6, 0, 4}), 130));
}

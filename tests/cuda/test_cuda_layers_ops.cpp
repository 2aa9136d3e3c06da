// The CUDA layer ops (RMSNorm, RoPE, SwiGLU, embedding, cross-entropy) against the f32 CPU reference.
//
// Pattern (tests/cuda/cuda_test_util.h): random f32 inputs rounded to bf16 first, so both backends see the same
// input values; CpuOps on those f32 values, CudaOps on bf16 device copies; every accumulated (+=) output starts
// from the same nonzero values on both sides, so the += contract is checked, and every written-only output
// starts from garbage, so a missed element shows.
//
// Tolerances, and why (u = 2^-24, the f32 unit roundoff; bf16 keeps 8 significant bits, so rounding a value to
// bf16 moves it by at most 2^-8 = 3.9e-3 of itself):
// - bf16 outputs: rtol 1e-2, i.e. one bf16 rounding (3.9e-3) with ~2.5x room for the f32 arithmetic that differs
//   between the backends (f32 vs double sums, FMA contraction, expf vs std::exp), which is orders of magnitude
//   smaller; plus a small atol sized per op for outputs near zero, where that f32 difference is absolute.
// - f32 outputs (rstd, lse, loss, dgain, dtable): only the inputs were rounded, the accumulation is f32 on the GPU
//   and double on the CPU, so the bound is the f32 summation error, derived per op below from the reduction's
//   depth (Higham: recursive summation of k terms errs by at most (k - 1) u sum|terms|).
// A wrong kernel (a missing term, a wrong index, a lost +=) makes errors of the size of the values themselves,
// far above every bound here.
#include "tests/cuda/cuda_test_main.h"
#include "tests/cuda/cuda_test_util.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

namespace {

constexpr double kU = 0x1p-24;       // f32 unit roundoff
constexpr double kBf16Rtol = 1e-2;   // one bf16 rounding (2^-8) with room for f32 differences (see above)

double max_abs(const Tensor& host_f32) {
    double m = 0;
    for (int64_t i = 0; i < host_f32.numel(); ++i) m = std::max(m, std::fabs(static_cast<double>(host_f32.f32()[i])));
    return m;
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------------
// RMSNorm

TEST_CASE("rmsnorm forward and backward match the CPU reference") {
    CudaOps& gpu = cuda_ops();
    CpuOps cpu;
    const float eps = 1e-5f;
    // 1000 rows: not a multiple of the 8 rows per block nor of the 64-row dgain chunks; d = 576 (SmolLM-135M) and
    // 960 (SmolLM-360M) are not multiples of the 128/256-column blocks; 3 rows of 64: fewer rows than a block.
    const std::vector<Shape> shapes = {{1000, 576}, {3, 64}, {2, 37, 960}};
    uint64_t seed = 100;
    for (const Shape& shape : shapes) {
        INFO("x shape " << shape_string(shape));
        const int64_t d = shape.back(), N = shape_numel(shape) / d;
        const Tensor x = bf16_randn(shape, seed++, 1.5f);
        Tensor gain = randn_host({d}, seed++, 0.3f);
        for (int64_t j = 0; j < d; ++j) gain.f32()[j] += 1.0f;
        round_to_bf16(gain);
        const Tensor x_d = to_cuda_bf16(x, gpu), gain_d = to_cuda_bf16(gain, gpu);

        // Forward: y and rstd are written, not accumulated: start them from garbage.
        Tensor y_ref = Tensor::zeros(shape), rstd_ref = Tensor::zeros({N});
        cpu.rmsnorm_forward(y_ref, rstd_ref, x, gain, eps);
        Tensor y = to_cuda_bf16(bf16_randn(shape, seed++), gpu);
        Tensor rstd = to_cuda_f32(randn_host({N}, seed++), gpu);
        gpu.rmsnorm_forward(y, rstd, x_d, gain_d, eps);
        // rstd: a sum of d positive squares; each lane sums d/32 of them, then 5 butterfly levels: relative error
        // <= (d/32 + 5) u <= 1.4e-6 at d = 960, halved by the square root, plus ~2 roundings for the division and
        // sqrt: ~1e-6. rtol 1e-5 leaves 10x.
        check_close(rstd, rstd_ref, 0.0, 1e-5, "rmsnorm rstd");
        // y = x rstd gain: one bf16 rounding of a product whose f32 value differs by ~1e-6 relative.
        check_close(y, y_ref, 1e-5, kBf16Rtol, "rmsnorm y");

        // Backward, with the CPU's rstd on both sides so it tests backward alone.
        const Tensor dy = bf16_randn(shape, seed++);
        const Tensor dx0 = bf16_randn(shape, seed++);        // bf16 prefill (exactly representable on the GPU)
        const Tensor dgain0 = randn_host({d}, seed++, 3.0f);  // f32 prefill
        Tensor dx_ref = dx0.clone(), dgain_ref = dgain0.clone();
        cpu.rmsnorm_backward(dx_ref, dgain_ref, dy, x, gain, rstd_ref);
        Tensor dx = to_cuda_bf16(dx0, gpu), dgain = to_cuda_f32(dgain0, gpu);
        gpu.rmsnorm_backward(dx, dgain, to_cuda_bf16(dy, gpu), x_d, gain_d, to_cuda_f32(rstd_ref, gpu));
        // dx: the row's dot product sum_k dy_k g_k x_k is f32 on the GPU, double on the CPU; with random signs its
        // relative error is ~(d/32 + 5) u sqrt(d) ~ 1e-5, which moves dx by ~1e-5 * |x| rstd^2 |dot| / d < 1e-5
        // absolute. atol 1e-4 covers that near zero; elsewhere the bf16 rounding of dx dominates.
        check_close(dx, dx_ref, 1e-4, kBf16Rtol, "rmsnorm dx");
        // dgain[j] = dgain0[j] + sum_n dy x rstd: the GPU sums chunks of 64 rows in order, then the chunks in
        // order, so each sum is a recursive sum of depth <= 64 + chunks (+ 1 for the prefill, + 2 for the term's own
        // products and FMA contraction). The bound is that depth times u times sum_n |terms| + |prefill| (computed
        // here from the inputs; 128 instead of 64 leaves room should the chunk size grow), plus 4u relative for
        // the CPU's own final roundings.
        double worst_abs_sum = 0;
        for (int64_t j = 0; j < d; ++j) {
            double s = std::fabs(dgain0.f32()[j]);
            for (int64_t n = 0; n < N; ++n)
                s += std::fabs(static_cast<double>(dy.f32()[n * d + j]) * x.f32()[n * d + j] * rstd_ref.f32()[n]);
            worst_abs_sum = std::max(worst_abs_sum, s);
        }
        const double chunks = std::ceil(static_cast<double>(N) / 64.0);
        const double dgain_atol = (128.0 + chunks + 3.0) * kU * worst_abs_sum;
        INFO("dgain atol " << dgain_atol);
        check_close(dgain, dgain_ref, dgain_atol, 4 * kU, "rmsnorm dgain");
    }
}

TEST_CASE("rmsnorm backward is bitwise reproducible (dgain reduction without atomics)") {
    CudaOps& gpu = cuda_ops();
    const int64_t N = 1000, d = 576;
    const Tensor x = to_cuda_bf16(bf16_randn({N, d}, 201), gpu), gain = to_cuda_bf16(bf16_randn({d}, 202), gpu);
    const Tensor dy = to_cuda_bf16(bf16_randn({N, d}, 203), gpu);
    const Tensor dx0 = bf16_randn({N, d}, 204), dgain0 = randn_host({d}, 205);
    Tensor y = gpu.activation({N, d}), rstd = gpu.f32_zeros({N});
    gpu.rmsnorm_forward(y, rstd, x, gain, 1e-5f);
    Tensor dx_a = to_cuda_bf16(dx0, gpu), dgain_a = to_cuda_f32(dgain0, gpu);
    Tensor dx_b = to_cuda_bf16(dx0, gpu), dgain_b = to_cuda_f32(dgain0, gpu);
    gpu.rmsnorm_backward(dx_a, dgain_a, dy, x, gain, rstd);
    gpu.rmsnorm_backward(dx_b, dgain_b, dy, x, gain, rstd);
    check_bitwise_equal(dgain_a, dgain_b, "rmsnorm dgain, two runs");
    check_bitwise_equal(dx_a, dx_b, "rmsnorm dx, two runs");
}

TEST_CASE("rmsnorm rejects wrong dtypes and shapes") {
    CudaOps& gpu = cuda_ops();
    Tensor x = gpu.activation({4, 8}), gain = gpu.activation({8}), y = gpu.activation({4, 8});
    Tensor rstd = gpu.f32_zeros({4});
    Tensor x_f32 = gpu.f32_zeros({4, 8}), gain_bad = gpu.activation({7}), rstd_bf16 = gpu.activation({4});
    CHECK_THROWS_AS(gpu.rmsnorm_forward(y, rstd, x_f32, gain, 1e-5f), std::invalid_argument);
    CHECK_THROWS_AS(gpu.rmsnorm_forward(y, rstd, x, gain_bad, 1e-5f), std::invalid_argument);
    CHECK_THROWS_AS(gpu.rmsnorm_forward(y, rstd_bf16, x, gain, 1e-5f), std::invalid_argument);
    Tensor dgain_bf16 = gpu.activation({8}), dx = gpu.activation({4, 8});
    CHECK_THROWS_AS(gpu.rmsnorm_backward(dx, dgain_bf16, y, x, gain, rstd), std::invalid_argument);
    Tensor x_host = Tensor::zeros({4, 8}, DType::bf16, Device::cpu);
    CHECK_THROWS_AS(gpu.rmsnorm_forward(y, rstd, x_host, gain, 1e-5f), std::invalid_argument);
}

// ---------------------------------------------------------------------------------------------------------------
// RoPE

TEST_CASE("rope forward and backward match the CPU reference") {
    CudaOps& gpu = cuda_ops();
    CpuOps cpu;
    struct Case {
        int64_t seq_len, batch, heads, head_dim;
        float theta;
    };
    // SmolLM-135M: 9 query heads, 3 kv heads, head_dim 64; a long sequence (positions up to 2047, where the f32
    // angle is least accurate); an odd half (3) and a single head.
    const std::vector<Case> cases = {
        {64, 3, 9, 64, 10000.0f}, {64, 3, 3, 64, 10000.0f}, {2048, 1, 3, 64, 100000.0f}, {5, 2, 1, 6, 10000.0f}};
    uint64_t seed = 300;
    for (const Case& c : cases) {
        INFO("seq_len " << c.seq_len << ", batch " << c.batch << ", heads " << c.heads << ", head_dim " << c.head_dim
                        << ", theta " << c.theta);
        const Shape shape = {c.seq_len * c.batch, c.heads, c.head_dim};
        const Tensor x = bf16_randn(shape, seed++);
        // The GPU angle pos * inv_freq is f32 (inv_freq rounded from double, then one product rounding): it is off
        // from the CPU's double angle by at most 2^-23 * pos <= 2^-23 * seq_len radians, and sincosf adds ~2^-23.
        // An output a cos - b sin then moves by at most (|a| + |b|) times that; 2x room. Beyond this absolute
        // term, the bf16 rounding of the output (rtol).
        const double atol = 2.0 * (2.0 * max_abs(x)) * (static_cast<double>(c.seq_len) * 0x1p-23 + 0x1p-22) + 1e-6;
        INFO("atol " << atol);

        Tensor out_ref = Tensor::zeros(shape);
        cpu.rope_forward(out_ref, x, c.seq_len, c.theta);
        Tensor out = to_cuda_bf16(bf16_randn(shape, seed++), gpu);  // written, not accumulated: start from garbage
        gpu.rope_forward(out, to_cuda_bf16(x, gpu), c.seq_len, c.theta);
        check_close(out, out_ref, atol, kBf16Rtol, "rope out");

        const Tensor dout = bf16_randn(shape, seed++);
        const Tensor din0 = bf16_randn(shape, seed++);
        Tensor din_ref = din0.clone();
        cpu.rope_backward(din_ref, dout, c.seq_len, c.theta);
        Tensor din = to_cuda_bf16(din0, gpu);
        gpu.rope_backward(din, to_cuda_bf16(dout, gpu), c.seq_len, c.theta);
        check_close(din, din_ref, 2.0 * (2.0 * max_abs(dout)) * (c.seq_len * 0x1p-23 + 0x1p-22) + 1e-6, kBf16Rtol,
                    "rope din");
    }
}

TEST_CASE("rope rejects bad shapes") {
    CudaOps& gpu = cuda_ops();
    Tensor x = gpu.activation({8, 2, 6}), out = gpu.activation({8, 2, 6});
    Tensor odd = gpu.activation({8, 2, 5}), x_f32 = gpu.f32_zeros({8, 2, 6});
    CHECK_THROWS_AS(gpu.rope_forward(out, x, 3, 10000.0f), std::invalid_argument);  // 8 rows, seq_len 3
    CHECK_THROWS_AS(gpu.rope_forward(odd, odd, 4, 10000.0f), std::invalid_argument);
    CHECK_THROWS_AS(gpu.rope_backward(out, x_f32, 4, 10000.0f), std::invalid_argument);
    Tensor huge = gpu.activation({1, 1, 1024});  // head_dim above the kernel's 512
    CHECK_THROWS_AS(gpu.rope_forward(huge, huge, 1, 10000.0f), std::invalid_argument);
}

// ---------------------------------------------------------------------------------------------------------------
// SwiGLU

TEST_CASE("swiglu forward and backward match the CPU reference") {
    CudaOps& gpu = cuda_ops();
    CpuOps cpu;
    // [333, 1536]: SmolLM-135M's FFN width, a row count that fills no block evenly; [7, 5]: smaller than a block.
    const std::vector<Shape> shapes = {{333, 1536}, {7, 5}};
    uint64_t seed = 400;
    for (const Shape& shape : shapes) {
        INFO("shape " << shape_string(shape));
        Tensor gate = randn_host(shape, seed++, 3.0f);
        // The sigmoid's edges: exp overflow (-100, -88.5: sigmoid 0 or subnormal), saturation (+100, 30), zero,
        // and the zero of silu' (-1.278) where 1 + z (1 - s) cancels.
        const float special[] = {-100.0f, 100.0f, -88.5f, 0.0f, -1.278f, 30.0f};
        for (int i = 0; i < 6 && i < gate.numel(); ++i) gate.f32()[i] = special[i];
        round_to_bf16(gate);
        const Tensor up = bf16_randn(shape, seed++);
        const Tensor gate_d = to_cuda_bf16(gate, gpu), up_d = to_cuda_bf16(up, gpu);

        Tensor out_ref = Tensor::zeros(shape);
        cpu.swiglu_forward(out_ref, gate, up);
        Tensor out = to_cuda_bf16(bf16_randn(shape, seed++), gpu);  // written: start from garbage
        gpu.swiglu_forward(out, gate_d, up_d);
        // f32 differences: expf vs std::exp (<= 2 ulp) and FMA contraction, ~1e-6 relative; atol 1e-5 covers the
        // absolute f32 error where the output is near zero, the bf16 rounding covers the rest.
        check_close(out, out_ref, 1e-5, kBf16Rtol, "swiglu out");

        const Tensor dout = bf16_randn(shape, seed++);
        const Tensor dgate0 = bf16_randn(shape, seed++), dup0 = bf16_randn(shape, seed++);
        Tensor dgate_ref = dgate0.clone(), dup_ref = dup0.clone();
        cpu.swiglu_backward(dgate_ref, dup_ref, dout, gate, up);
        Tensor dgate = to_cuda_bf16(dgate0, gpu), dup = to_cuda_bf16(dup0, gpu);
        gpu.swiglu_backward(dgate, dup, to_cuda_bf16(dout, gpu), gate_d, up_d);
        // dgate: 1 + z (1 - s) cancels near z = -1.278 with an absolute f32 error ~u |z (1 - s)|; times
        // |dout up s| <~ 20 that is < 1e-5.
        check_close(dgate, dgate_ref, 1e-5, kBf16Rtol, "swiglu dgate");
        check_close(dup, dup_ref, 1e-5, kBf16Rtol, "swiglu dup");
    }
}

TEST_CASE("swiglu rejects mismatched tensors") {
    CudaOps& gpu = cuda_ops();
    Tensor a = gpu.activation({4, 6}), b = gpu.activation({4, 6}), c = gpu.activation({4, 5});
    Tensor f = gpu.f32_zeros({4, 6});
    CHECK_THROWS_AS(gpu.swiglu_forward(a, b, c), std::invalid_argument);
    CHECK_THROWS_AS(gpu.swiglu_forward(f, a, b), std::invalid_argument);
    Tensor d = gpu.activation({4, 6});
    CHECK_THROWS_AS(gpu.swiglu_backward(a, c, b, d, d), std::invalid_argument);
}

// ---------------------------------------------------------------------------------------------------------------
// Embedding

namespace {

std::vector<int32_t> random_ids(int64_t n, int64_t below, uint64_t seed) {
    Rng rng(seed);
    std::vector<int32_t> ids(static_cast<size_t>(n));
    for (auto& id : ids) id = static_cast<int32_t>(rng.below(static_cast<uint64_t>(below)));
    return ids;
}

}  // namespace

TEST_CASE("embedding forward matches the CPU reference exactly") {
    CudaOps& gpu = cuda_ops();
    CpuOps cpu;
    struct Case {
        int64_t vocab, d;
        Shape token_shape;
    };
    // A byte vocabulary with tokens [3, 259] (777 rows); SmolLM's 49152 x 576 table with a few rows.
    const std::vector<Case> cases = {{256, 576, {3, 259}}, {49152, 576, {10}}};
    uint64_t seed = 500;
    for (const Case& c : cases) {
        INFO("vocab " << c.vocab << ", d " << c.d);
        const int64_t N = shape_numel(c.token_shape);
        std::vector<int32_t> ids = random_ids(N, c.vocab, seed++);
        ids[0] = 0;
        ids[static_cast<size_t>(N - 1)] = static_cast<int32_t>(c.vocab - 1);
        const Tensor tokens = i32_host(c.token_shape, ids);
        const Tensor table = bf16_randn({c.vocab, c.d}, seed++);
        Tensor out_ref = Tensor::zeros({N, c.d});
        cpu.embedding_forward(out_ref, tokens, table);
        const Tensor table_d = to_cuda_bf16(table, gpu);
        // A copy of bf16 values: exact (atol = rtol = 0). Tokens on the device, and on the host.
        Tensor out = to_cuda_bf16(bf16_randn({N, c.d}, seed++), gpu);
        gpu.embedding_forward(out, to_cuda(tokens, gpu), table_d);
        check_close(out, out_ref, 0.0, 0.0, "embedding out (device tokens)");
        Tensor out_h = to_cuda_bf16(bf16_randn({N, c.d}, seed++), gpu);
        gpu.embedding_forward(out_h, tokens, table_d);
        check_close(out_h, out_ref, 0.0, 0.0, "embedding out (host tokens)");
    }
}

TEST_CASE("embedding backward matches the CPU reference bit for bit, and repeats bit for bit") {
    CudaOps& gpu = cuda_ops();
    CpuOps cpu;
    const int64_t vocab = 1000, d = 576, N = 777;
    // Heavy repetition: ids drawn from [0, 40) (each about 20 times), plus the table's last row.
    std::vector<int32_t> ids = random_ids(N, 40, 600);
    ids[100] = static_cast<int32_t>(vocab - 1);
    ids[101] = static_cast<int32_t>(vocab - 1);
    const Tensor tokens = i32_host({N}, ids);
    const Tensor dout = bf16_randn({N, d}, 601);
    const Tensor dtable0 = randn_host({vocab, d}, 602);  // f32 prefill, also on rows no token uses
    Tensor dtable_ref = dtable0.clone();
    cpu.embedding_backward(dtable_ref, tokens, dout);

    const Tensor tokens_d = to_cuda(tokens, gpu), dout_d = to_cuda_bf16(dout, gpu);
    Tensor dtable_a = to_cuda_f32(dtable0, gpu), dtable_b = to_cuda_f32(dtable0, gpu);
    gpu.embedding_backward(dtable_a, tokens_d, dout_d);
    gpu.embedding_backward(dtable_b, tokens_d, dout_d);
    // Each dtable element is owned by one thread, which adds the rows of its token onto the running f32 value in
    // row order: the CPU reference's operations in the CPU reference's order on the same (bf16-valued) inputs,
    // hence the same bits (atol = rtol = 0).
    check_close(dtable_a, dtable_ref, 0.0, 0.0, "embedding dtable");
    check_bitwise_equal(dtable_a, dtable_b, "embedding dtable, two runs");
    // Tokens on the host take the same path after the download.
    Tensor dtable_h = to_cuda_f32(dtable0, gpu);
    gpu.embedding_backward(dtable_h, tokens, dout_d);
    check_bitwise_equal(dtable_h, dtable_a, "embedding dtable, host tokens");
}

TEST_CASE("embedding: out-of-range ids throw before anything is written; empty batches are no-ops") {
    CudaOps& gpu = cuda_ops();
    const int64_t vocab = 50, d = 8, N = 10;
    const Tensor table = to_cuda_bf16(bf16_randn({vocab, d}, 700), gpu);
    const Tensor out0 = bf16_randn({N, d}, 701);
    const Tensor dtable0 = randn_host({vocab, d}, 702);
    for (int32_t bad : {static_cast<int32_t>(vocab), -1}) {
        INFO("bad id " << bad);
        std::vector<int32_t> ids = random_ids(N, vocab, 703);
        ids[5] = bad;
        const Tensor tokens = to_cuda(i32_host({N}, ids), gpu);
        Tensor out = to_cuda_bf16(out0, gpu);
        CHECK_THROWS_AS(gpu.embedding_forward(out, tokens, table), std::out_of_range);
        check_close(out, out0, 0.0, 0.0, "embedding out untouched");
        Tensor dtable = to_cuda_f32(dtable0, gpu);
        const Tensor dout = to_cuda_bf16(bf16_randn({N, d}, 704), gpu);
        CHECK_THROWS_AS(gpu.embedding_backward(dtable, tokens, dout), std::out_of_range);
        check_bitwise_equal(dtable, to_cuda_f32(dtable0, gpu), "embedding dtable untouched");
    }
    // Wrong dtypes.
    Tensor out = gpu.activation({N, d});
    Tensor tokens_f32 = gpu.f32_zeros({N}), table_f32 = gpu.f32_zeros({vocab, d});
    CHECK_THROWS_AS(gpu.embedding_forward(out, tokens_f32, table), std::invalid_argument);
    CHECK_THROWS_AS(gpu.embedding_forward(out, to_cuda(i32_host({N}, random_ids(N, vocab, 705)), gpu), table_f32),
                    std::invalid_argument);
    Tensor dtable_bf16 = gpu.activation({vocab, d});
    CHECK_THROWS_AS(gpu.embedding_backward(dtable_bf16, to_cuda(i32_host({N}, random_ids(N, vocab, 706)), gpu), out),
                    std::invalid_argument);
    // N = 0.
    Tensor empty_tokens = Tensor::zeros({0}, DType::i32, Device::cuda), empty_out = gpu.activation({0, d});
    Tensor dtable = to_cuda_f32(dtable0, gpu);
    CHECK_NOTHROW(gpu.embedding_forward(empty_out, empty_tokens, table));
    CHECK_NOTHROW(gpu.embedding_backward(dtable, empty_tokens, empty_out));
    check_bitwise_equal(dtable, to_cuda_f32(dtable0, gpu), "embedding dtable after an empty batch");
}

// ---------------------------------------------------------------------------------------------------------------
// Cross-entropy

TEST_CASE("cross-entropy forward and backward match the CPU reference") {
    CudaOps& gpu = cuda_ops();
    CpuOps cpu;
    struct Case {
        Shape logits_shape;  // [.., V]
    };
    // SmolLM's vocabulary (49152) with a few rows; the byte vocabulary (256, fewer columns than block threads)
    // with 37 rows; a rank-3 [1, 3, 1000].
    const std::vector<Shape> shapes = {{5, 49152}, {37, 256}, {1, 3, 1000}};
    uint64_t seed = 800;
    for (const Shape& shape : shapes) {
        INFO("logits " << shape_string(shape));
        const int64_t V = shape.back(), N = shape_numel(shape) / V;
        Tensor logits = randn_host(shape, seed++, 2.0f);
        std::vector<int32_t> t = random_ids(N, V, seed++);
        t[0] = 0;
        t[static_cast<size_t>(N - 1)] = static_cast<int32_t>(V - 1);
        logits.f32()[0] = 30.0f;  // row 0: its target dominates (loss ~ 0, where lse - x[target] cancels)
        round_to_bf16(logits);
        Shape target_shape(shape.begin(), shape.end() - 1);
        const Tensor targets = i32_host(target_shape, t);
        const Tensor logits_d = to_cuda_bf16(logits, gpu), targets_d = to_cuda(targets, gpu);

        Tensor loss_ref = Tensor::zeros({N}), lse_ref = Tensor::zeros({N});
        cpu.cross_entropy_forward(loss_ref, lse_ref, logits, targets);
        Tensor loss = to_cuda_f32(randn_host({N}, seed++), gpu), lse = to_cuda_f32(randn_host({N}, seed++), gpu);
        gpu.cross_entropy_forward(loss, lse, logits_d, targets_d);
        // s = sum_j exp(x_j - m) has positive terms, each with <= 2 ulp from expf; each of the 512 threads sums
        // ceil(V/512) terms, then 9 tree levels: relative error <= (ceil(V/512) + 9 + 2) u, and log(s) turns a
        // relative error of s into the same absolute error of lse and loss. 2x room, and a few ulps relative for
        // the roundings of lse itself (4u).
        const double atol = 2.0 * (std::ceil(static_cast<double>(V) / 512.0) + 12.0) * kU;
        INFO("lse/loss atol " << atol);
        check_close(lse, lse_ref, atol, 4 * kU, "cross-entropy lse");
        check_close(loss, loss_ref, atol, 4 * kU, "cross-entropy loss");
        // Host targets take the same path.
        Tensor loss_h = gpu.f32_zeros({N}), lse_h = gpu.f32_zeros({N});
        gpu.cross_entropy_forward(loss_h, lse_h, logits_d, targets);
        check_bitwise_equal(loss_h, loss, "cross-entropy loss, host targets");

        // Backward with the CPU's lse on both sides. The prefill is of the size of dloss * softmax (~dloss / V), so
        // a lost term or a lost += shows far above the bf16 rounding.
        const float dloss = 0.37f;
        Tensor dlogits0 = randn_host(shape, seed++, dloss / static_cast<float>(V));
        round_to_bf16(dlogits0);
        Tensor dlogits_ref = dlogits0.clone();
        cpu.cross_entropy_backward(dlogits_ref, logits, lse_ref, targets, dloss);
        Tensor dlogits = to_cuda_bf16(dlogits0, gpu);
        gpu.cross_entropy_backward(dlogits, logits_d, to_cuda_f32(lse_ref, gpu), targets_d, dloss);
        // Same f32 operations but expf vs std::exp (<= 2 ulp) and FMA contraction: ~1e-7 relative to the terms,
        // i.e. < 1e-6 * dloss / V absolute; atol 1e-3 * dloss / V is far above that and far below any real term.
        check_close(dlogits, dlogits_ref, 1e-3 * dloss / static_cast<double>(V), kBf16Rtol, "cross-entropy dlogits");
    }
}

TEST_CASE("cross-entropy: out-of-range targets throw before anything is written; bad shapes are rejected") {
    CudaOps& gpu = cuda_ops();
    const int64_t V = 100, N = 6;
    const Tensor logits = to_cuda_bf16(bf16_randn({N, V}, 900), gpu);
    const Tensor loss0 = randn_host({N}, 901);
    for (int32_t bad : {static_cast<int32_t>(V), -1}) {
        INFO("bad target " << bad);
        std::vector<int32_t> t = random_ids(N, V, 902);
        t[3] = bad;
        const Tensor targets = to_cuda(i32_host({N}, t), gpu);
        Tensor loss = to_cuda_f32(loss0, gpu), lse = gpu.f32_zeros({N});
        CHECK_THROWS_AS(gpu.cross_entropy_forward(loss, lse, logits, targets), std::out_of_range);
        check_bitwise_equal(loss, to_cuda_f32(loss0, gpu), "cross-entropy loss untouched");
        Tensor dlogits = gpu.activation({N, V});
        CHECK_THROWS_AS(gpu.cross_entropy_backward(dlogits, logits, lse, targets, 1.0f), std::out_of_range);
        check_close(dlogits, Tensor::zeros({N, V}), 0.0, 0.0, "cross-entropy dlogits untouched");
    }
    const Tensor targets = to_cuda(i32_host({N}, random_ids(N, V, 903)), gpu);
    Tensor loss = gpu.f32_zeros({N}), lse = gpu.f32_zeros({N}), short_lse = gpu.f32_zeros({N - 1});
    Tensor logits_f32 = gpu.f32_zeros({N, V}), loss_bf16 = gpu.activation({N});
    CHECK_THROWS_AS(gpu.cross_entropy_forward(loss, lse, logits_f32, targets), std::invalid_argument);
    CHECK_THROWS_AS(gpu.cross_entropy_forward(loss_bf16, lse, logits, targets), std::invalid_argument);
    CHECK_THROWS_AS(gpu.cross_entropy_forward(loss, short_lse, logits, targets), std::invalid_argument);
    Tensor dlogits_f32 = gpu.f32_zeros({N, V});
    CHECK_THROWS_AS(gpu.cross_entropy_backward(dlogits_f32, logits, lse, targets, 1.0f), std::invalid_argument);
}

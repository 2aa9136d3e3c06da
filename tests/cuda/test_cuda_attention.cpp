// CudaOps::attention_forward / attention_backward (cuda/attention.cu) against the CPU reference (CpuOps), for
// both implementations behind them: the hand-written kernels and cuDNN's fused flash attention
// (cuda/attention_cudnn.cu). Each case forces its implementation (set_attention_impl, as
// NOBUBBLE_CUDA_ATTENTION=kernel|cudnn would) and checks with the call counters that it really ran: a cuDNN
// case fails, rather than silently testing the kernels, where cuDNN does not take the problem.
//
// Inputs: q, k, v, dout ~ N(0, 1) (scaled scores then have stddev ~1, so the softmax is far from uniform),
// rounded to bf16 first so that both backends see identical values.
//
// Tolerances (stated per quantity; m = max |reference| of the quantity compared):
// - out (bf16): |cuda - cpu| <= 2e-2 m + 1e-3. The kernel rounds P to bf16 before P V (2^-9 relative per
//   weight) and rounds out to bf16 (2^-9 relative); both stay well below 1% of the output's magnitude.
// - lse (f32): |cuda - cpu| <= 1e-3 absolute. Scores come from exact bf16 products summed in f32 on both
//   sides, the running sum is f32: errors are ~1e-6.
// - dq, dk, dv (bf16, accumulated with +=): the outputs are pre-filled with nonzero values (the same on
//   both sides) and the increment is compared: |cuda - cpu| <= 3e-2 g + 1e-5 + 2^-8 |cpu|, g = max |increment|.
//   The kernels round P and dS to bf16 before the tensor-core products (2^-9 relative per term, summed over
//   up to T terms with random signs), and the stored result prefill + increment is rounded to bf16 once
//   (<= 2^-9 relative to the stored value, covered by the rtol of 2^-8).
// - Repeatability, both implementations: the same inputs twice give the same bits for out, lse, dq, dk and dv
//   (the kernels use no atomics; cuDNN's backward is built in its deterministic variant, without the f32 dQ
//   accumulator that cuDNN's default backward adds into from many thread blocks: cuda/attention_cudnn.cu).
// The cuDNN cases use the same tolerances: cuDNN also rounds P (and dS) to bf16 before its tensor-core products
// and stores bf16; its backward writes bf16 gradients that are then added into the prefilled ones, so each stored
// gradient is rounded twice: 2^-9 of the increment (well inside 3e-2 g) plus the rtol 2^-8 of the sum.
// cuDNN against the kernels: each is within the tolerance above of the CPU reference, so they are within the
// sum of the two tolerances of each other (the reference's |value| replaced by the kernel's, a bf16 rounding
// away, covered by doubling the rtol).
#include "tests/cuda/cuda_test_main.h"
#include "tests/cuda/cuda_test_util.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "cuda/attention_cudnn.h"
#include "cuda/context.h"
#include "src/core/error.h"

namespace {

struct Shape5 {
    int64_t B, T, H, KV, hd;
};

// Forces an implementation for one scope (the previous choice comes back after).
class UseImpl {
public:
    UseImpl(CudaOps& ops, AttentionImpl impl) : ops_(ops), saved_(attention_impl(ops)) {
        set_attention_impl(ops, impl);
        reset_attention_counts(ops);
    }
    ~UseImpl() { set_attention_impl(ops_, saved_); }
    UseImpl(const UseImpl&) = delete;
    UseImpl& operator=(const UseImpl&) = delete;

private:
    CudaOps& ops_;
    AttentionImpl saved_;
};

// CHECKs that exactly `forward` forward and `backward` backward calls ran, all on `impl`.
void check_ran_on(CudaOps& ops, AttentionImpl impl, int64_t forward, int64_t backward) {
    const AttentionCounts n = attention_counts(ops);
    INFO("implementation " << std::string(attention_impl_name(impl)) << "; " << attention_report(ops));
    if (impl == AttentionImpl::cudnn) {
        CHECK(n.cudnn_forward == forward);
        CHECK(n.cudnn_backward == backward);
        CHECK(n.kernel_forward + n.kernel_backward == 0);
    } else {
        CHECK(n.kernel_forward == forward);
        CHECK(n.kernel_backward == backward);
        CHECK(n.cudnn_forward + n.cudnn_backward == 0);
    }
}

double max_abs(const Tensor& host) {
    const float* p = host.f32();
    double m = 0;
    for (int64_t i = 0, n = host.numel(); i < n; ++i) m = std::max(m, static_cast<double>(std::fabs(p[i])));
    return m;
}

Tensor rand_bf16_host(const Shape& shape, uint64_t seed, float stddev = 1.0f) {
    Tensor t = randn_host(shape, seed, stddev);
    round_to_bf16(t);
    return t;
}

// a - b element-wise (host f32).
Tensor minus(const Tensor& a, const Tensor& b) {
    Tensor r = a.clone();
    float* pr = r.f32();
    const float* pb = b.f32();
    for (int64_t i = 0, n = r.numel(); i < n; ++i) pr[i] -= pb[i];
    return r;
}

struct Inputs {
    Shape5 s;
    Tensor q, k, v, dout;  // host f32, bf16-exact
    Shape q_shape() const { return {s.B, s.T, s.H, s.hd}; }
    Shape kv_shape() const { return {s.B, s.T, s.KV, s.hd}; }
    Shape lse_shape() const { return {s.B, s.H, s.T}; }
};

Inputs make_inputs(const Shape5& s, uint64_t seed) {
    Inputs in{s, {}, {}, {}, {}};
    in.q = rand_bf16_host(in.q_shape(), seed + 1);
    in.k = rand_bf16_host(in.kv_shape(), seed + 2);
    in.v = rand_bf16_host(in.kv_shape(), seed + 3);
    in.dout = rand_bf16_host(in.q_shape(), seed + 4);
    return in;
}

void check_attention_case(const Shape5& s, uint64_t seed, AttentionImpl impl = AttentionImpl::kernel) {
    INFO("B=" << s.B << " T=" << s.T << " H=" << s.H << " KV=" << s.KV << " hd=" << s.hd << " on "
              << std::string(attention_impl_name(impl)));
    CudaOps& ops = cuda_ops();
    const UseImpl use(ops, impl);
    CpuOps cpu;
    const Inputs in = make_inputs(s, seed);

    // ---- forward ----
    Tensor out_ref = Tensor::zeros(in.q_shape());
    Tensor lse_ref = Tensor::zeros(in.lse_shape());
    cpu.attention_forward(out_ref, lse_ref, in.q, in.k, in.v);

    const Tensor qd = to_cuda_bf16(in.q, ops), kd = to_cuda_bf16(in.k, ops), vd = to_cuda_bf16(in.v, ops);
    const Tensor dod = to_cuda_bf16(in.dout, ops);
    // Garbage in the outputs: the forward must overwrite every element.
    Tensor out_d = to_cuda_bf16(rand_bf16_host(in.q_shape(), seed + 5, 100.0f), ops);
    Tensor lse_d = to_cuda_f32(randn_host(in.lse_shape(), seed + 6, 100.0f), ops);
    ops.attention_forward(out_d, lse_d, qd, kd, vd);

    const double out_max = max_abs(out_ref);
    check_close(out_d, out_ref, 2e-2 * out_max + 1e-3, 0.0, "attention_forward out");
    check_close(lse_d, lse_ref, 1e-3, 0.0, "attention_forward lse");

    // ---- backward, on the same out (as bf16, what the CUDA forward stores) and lse for both backends ----
    Tensor out_b = out_ref.clone();
    round_to_bf16(out_b);
    const Tensor dq0 = rand_bf16_host(in.q_shape(), seed + 7), dk0 = rand_bf16_host(in.kv_shape(), seed + 8),
                 dv0 = rand_bf16_host(in.kv_shape(), seed + 9);
    Tensor dq_ref = dq0.clone(), dk_ref = dk0.clone(), dv_ref = dv0.clone();
    cpu.attention_backward(dq_ref, dk_ref, dv_ref, in.dout, in.q, in.k, in.v, out_b, lse_ref);

    Tensor dq_d = to_cuda_bf16(dq0, ops), dk_d = to_cuda_bf16(dk0, ops), dv_d = to_cuda_bf16(dv0, ops);
    const Tensor out_bd = to_cuda_bf16(out_b, ops), lse_rd = to_cuda_f32(lse_ref, ops);
    ops.attention_backward(dq_d, dk_d, dv_d, dod, qd, kd, vd, out_bd, lse_rd);

    const double rtol = 1.0 / 256;  // the bf16 rounding of the stored prefill + increment
    const double gq = max_abs(minus(dq_ref, dq0)), gk = max_abs(minus(dk_ref, dk0)), gv = max_abs(minus(dv_ref, dv0));
    MESSAGE("max |ref|: out " << out_max << ", dq " << gq << ", dk " << gk << ", dv " << gv);
    if (s.T > 1) {  // with one token P = 1 and dS = P (dP - D) = 0: dq and dk get (almost) nothing
        CHECK(gq > 0);
        CHECK(gk > 0);
    }
    CHECK(gv > 0);
    // 1e-5: a floor for the T = 1 case, where the dq/dk increments are rounding noise around 0.
    check_close(dq_d, dq_ref, 3e-2 * gq + 1e-5, rtol, "attention_backward dq");
    check_close(dk_d, dk_ref, 3e-2 * gk + 1e-5, rtol, "attention_backward dk");
    check_close(dv_d, dv_ref, 3e-2 * gv + 1e-5, rtol, "attention_backward dv");
    check_ran_on(ops, impl, 1, 1);
}

}  // namespace

TEST_CASE("attention: B=2 T=64 H=4 KV=2 hd=64 (GQA)") { check_attention_case({2, 64, 4, 2, 64}, 100); }
TEST_CASE("attention: T=77, not a multiple of the 64-row tile") { check_attention_case({2, 77, 4, 2, 64}, 200); }
TEST_CASE("attention: MHA (H = KV)") { check_attention_case({2, 77, 4, 4, 64}, 300); }
TEST_CASE("attention: MQA (KV = 1)") { check_attention_case({2, 77, 4, 1, 64}, 400); }
TEST_CASE("attention: SmolLM-135M shape B=1 T=256 H=9 KV=3 hd=64") { check_attention_case({1, 256, 9, 3, 64}, 500); }
TEST_CASE("attention: hd=128") { check_attention_case({2, 130, 4, 2, 128}, 600); }
TEST_CASE("attention: hd=40 and hd=96 (zero-padded to 64 / 128)") {
    check_attention_case({1, 100, 2, 1, 40}, 700);
    check_attention_case({1, 100, 4, 2, 96}, 800);
}
TEST_CASE("attention: tiny T=1 and T=5") {
    check_attention_case({1, 1, 2, 1, 64}, 900);
    check_attention_case({3, 5, 2, 2, 8}, 1000);
}
TEST_CASE("attention: long B=1 T=2048 H=15 KV=5 hd=64") { check_attention_case({1, 2048, 15, 5, 64}, 1100); }

// ---- cuDNN's fused attention (forced: these fail if cuDNN does not take the problem) ----
TEST_CASE("attention cuDNN: B=2 T=64 H=4 KV=2 hd=64 (GQA)") {
    check_attention_case({2, 64, 4, 2, 64}, 2100, AttentionImpl::cudnn);
}
TEST_CASE("attention cuDNN: T=77, not a multiple of 64") {
    check_attention_case({2, 77, 4, 2, 64}, 2200, AttentionImpl::cudnn);
}
TEST_CASE("attention cuDNN: MHA (H = KV) and MQA (KV = 1)") {
    check_attention_case({2, 77, 4, 4, 64}, 2300, AttentionImpl::cudnn);
    check_attention_case({2, 77, 4, 1, 64}, 2400, AttentionImpl::cudnn);
}
TEST_CASE("attention cuDNN: SmolLM-135M shape B=1 T=256 H=9 KV=3 hd=64") {
    check_attention_case({1, 256, 9, 3, 64}, 2500, AttentionImpl::cudnn);
}
TEST_CASE("attention cuDNN: hd=128, T=130") { check_attention_case({2, 130, 4, 2, 128}, 2600, AttentionImpl::cudnn); }
TEST_CASE("attention cuDNN: long B=1 T=2048 H=15 KV=5 hd=64") {
    check_attention_case({1, 2048, 15, 5, 64}, 2700, AttentionImpl::cudnn);
}

namespace {

// One implementation's forward, then its backward on that forward's out and lse (the pairing training uses)
// into prefilled gradients; host f32 copies of everything.
struct Run {
    Tensor out, lse, dq, dk, dv;
};

Run run_on(AttentionImpl impl, const Inputs& in, const Tensor& dq0, const Tensor& dk0, const Tensor& dv0) {
    CudaOps& ops = cuda_ops();
    const UseImpl use(ops, impl);
    const Tensor qd = to_cuda_bf16(in.q, ops), kd = to_cuda_bf16(in.k, ops), vd = to_cuda_bf16(in.v, ops);
    const Tensor dod = to_cuda_bf16(in.dout, ops);
    Tensor out = ops.activation(in.q_shape()), lse = ops.f32_zeros(in.lse_shape());
    ops.attention_forward(out, lse, qd, kd, vd);
    Tensor dq = to_cuda_bf16(dq0, ops), dk = to_cuda_bf16(dk0, ops), dv = to_cuda_bf16(dv0, ops);
    ops.attention_backward(dq, dk, dv, dod, qd, kd, vd, out, lse);
    check_ran_on(ops, impl, 1, 1);
    return {to_host_f32(out, ops), to_host_f32(lse, ops), to_host_f32(dq, ops), to_host_f32(dk, ops),
            to_host_f32(dv, ops)};
}

}  // namespace

TEST_CASE("attention: cuDNN against the hand-written kernels (each with its own forward's out and lse)") {
    for (const Shape5 s : {Shape5{2, 200, 6, 2, 64}, Shape5{1, 150, 4, 1, 128}, Shape5{2, 96, 9, 3, 64}}) {
        INFO("B=" << s.B << " T=" << s.T << " H=" << s.H << " KV=" << s.KV << " hd=" << s.hd);
        const Inputs in = make_inputs(s, 3000);
        const Tensor dq0 = rand_bf16_host(in.q_shape(), 3007), dk0 = rand_bf16_host(in.kv_shape(), 3008),
                     dv0 = rand_bf16_host(in.kv_shape(), 3009);
        const Run kernel = run_on(AttentionImpl::kernel, in, dq0, dk0, dv0);
        const Run cudnn = run_on(AttentionImpl::cudnn, in, dq0, dk0, dv0);
        // Twice the tolerances against the CPU reference (see the top of the file).
        const double m = max_abs(kernel.out);
        check_close(cudnn.out, kernel.out, 2 * (2e-2 * m + 1e-3), 0.0, "out: cuDNN vs kernels");
        check_close(cudnn.lse, kernel.lse, 2e-3, 0.0, "lse: cuDNN vs kernels");
        const double rtol = 2.0 / 256;
        const double gq = max_abs(minus(kernel.dq, dq0)), gk = max_abs(minus(kernel.dk, dk0)),
                     gv = max_abs(minus(kernel.dv, dv0));
        check_close(cudnn.dq, kernel.dq, 2 * (3e-2 * gq + 1e-5), rtol, "dq: cuDNN vs kernels");
        check_close(cudnn.dk, kernel.dk, 2 * (3e-2 * gk + 1e-5), rtol, "dk: cuDNN vs kernels");
        check_close(cudnn.dv, kernel.dv, 2 * (3e-2 * gv + 1e-5), rtol, "dv: cuDNN vs kernels");
        // cuDNN again on the same inputs: the same bits (its backward is the deterministic variant).
        const Run again = run_on(AttentionImpl::cudnn, in, dq0, dk0, dv0);
        check_bitwise_equal(again.out, cudnn.out, "out: cuDNN twice");
        check_bitwise_equal(again.lse, cudnn.lse, "lse: cuDNN twice");
        check_bitwise_equal(again.dq, cudnn.dq, "dq: cuDNN twice");
        check_bitwise_equal(again.dk, cudnn.dk, "dk: cuDNN twice");
        check_bitwise_equal(again.dv, cudnn.dv, "dv: cuDNN twice");
    }
}

TEST_CASE("attention: NOBUBBLE_CUDA_ATTENTION values") {
    CHECK(parse_attention_impl(nullptr) == AttentionImpl::automatic);
    CHECK(parse_attention_impl("") == AttentionImpl::automatic);
    CHECK(parse_attention_impl("auto") == AttentionImpl::automatic);
    CHECK(parse_attention_impl("cudnn") == AttentionImpl::cudnn);
    CHECK(parse_attention_impl("kernel") == AttentionImpl::kernel);
    CHECK_THROWS_WITH_AS(parse_attention_impl("flash"), doctest::Contains("NOBUBBLE_CUDA_ATTENTION='flash'"),
                         RuntimeError);
}

// auto: cuDNN where it takes the call, the kernels where it does not (here: an lse view that does not start
// 16-byte aligned, which the kernels accept and cuDNN's plans do not); cudnn forced: a RuntimeError instead.
TEST_CASE("attention: auto uses cuDNN, and the kernels where cuDNN cannot run the call") {
    CudaOps& ops = cuda_ops();
    CpuOps cpu;
    const Shape5 s{2, 77, 2, 1, 64};  // lse rows of H*T = 154 floats: a view from row 1 starts 616 bytes in
    const Inputs in = make_inputs(s, 4000);
    Tensor out_ref = Tensor::zeros(in.q_shape()), lse_ref = Tensor::zeros(in.lse_shape());
    cpu.attention_forward(out_ref, lse_ref, in.q, in.k, in.v);
    const double out_max = max_abs(out_ref);
    const Tensor qd = to_cuda_bf16(in.q, ops), kd = to_cuda_bf16(in.k, ops), vd = to_cuda_bf16(in.v, ops);

    const UseImpl use(ops, AttentionImpl::automatic);
    Tensor out = ops.activation(in.q_shape()), lse = ops.f32_zeros(in.lse_shape());
    ops.attention_forward(out, lse, qd, kd, vd);
    CHECK(std::string(last_attention_impl(ops)) == "cudnn");
    check_close(out, out_ref, 2e-2 * out_max + 1e-3, 0.0, "auto (cuDNN) out");
    check_close(lse, lse_ref, 1e-3, 0.0, "auto (cuDNN) lse");

    Tensor lse_rows = ops.f32_zeros({s.B + 1, s.H, s.T});
    Tensor lse_view = lse_rows.rows(1, s.B + 1);
    REQUIRE(reinterpret_cast<uintptr_t>(lse_view.data()) % 16 != 0);
    Tensor out2 = ops.activation(in.q_shape());
    ops.attention_forward(out2, lse_view, qd, kd, vd);
    CHECK(std::string(last_attention_impl(ops)) == "kernel");
    check_close(out2, out_ref, 2e-2 * out_max + 1e-3, 0.0, "auto (kernels) out");
    check_close(lse_view, lse_ref, 1e-3, 0.0, "auto (kernels) lse");
    const std::string report = attention_report(ops);
    INFO(report);
    CHECK(report.find("cuDNN not used") != std::string::npos);

    set_attention_impl(ops, AttentionImpl::cudnn);
    CHECK_THROWS_WITH_AS(ops.attention_forward(out2, lse_view, qd, kd, vd), doctest::Contains("aligned"),
                         RuntimeError);
}

namespace {

// Informational: times the forward and the backward of one shape on `impl` (5 calls each after a warm-up that
// also builds any plans) and prints them with their rate in useful FLOPs (doctest always prints MESSAGE). The
// only check is that every call ran on `impl`.
void print_attention_timing(CudaOps& ops, const Shape5& s, AttentionImpl impl, uint64_t seed) {
    const UseImpl use(ops, impl);
    const Inputs in = make_inputs(s, seed);
    const Tensor qd = to_cuda_bf16(in.q, ops), kd = to_cuda_bf16(in.k, ops), vd = to_cuda_bf16(in.v, ops);
    const Tensor dod = to_cuda_bf16(in.dout, ops);
    Tensor out = ops.activation(in.q_shape()), lse = ops.f32_zeros(in.lse_shape());
    Tensor dq = ops.activation(in.q_shape()), dk = ops.activation(in.kv_shape()), dv = ops.activation(in.kv_shape());
    cudaStream_t stream = ops.context().stream;
    cudaEvent_t e[3];
    for (cudaEvent_t& event : e) REQUIRE(cudaEventCreate(&event) == cudaSuccess);
    ops.attention_forward(out, lse, qd, kd, vd);  // warm-up (and the plans)
    ops.attention_backward(dq, dk, dv, dod, qd, kd, vd, out, lse);
    constexpr int kIters = 5;
    REQUIRE(cudaEventRecord(e[0], stream) == cudaSuccess);
    for (int i = 0; i < kIters; ++i) ops.attention_forward(out, lse, qd, kd, vd);
    REQUIRE(cudaEventRecord(e[1], stream) == cudaSuccess);
    for (int i = 0; i < kIters; ++i) ops.attention_backward(dq, dk, dv, dod, qd, kd, vd, out, lse);
    REQUIRE(cudaEventRecord(e[2], stream) == cudaSuccess);
    REQUIRE(cudaEventSynchronize(e[2]) == cudaSuccess);
    float fwd_ms = 0, bwd_ms = 0;
    REQUIRE(cudaEventElapsedTime(&fwd_ms, e[0], e[1]) == cudaSuccess);
    REQUIRE(cudaEventElapsedTime(&bwd_ms, e[1], e[2]) == cudaSuccess);
    fwd_ms /= kIters;
    bwd_ms /= kIters;
    // Causal useful FLOPs: forward 2 GEMMs, backward 5 (2.5x), each 2*B*H*hd*T^2/2.
    const double gemm = 2.0 * s.B * s.H * s.hd * static_cast<double>(s.T) * s.T / 2;
    MESSAGE(std::string(attention_impl_name(impl))
            << " attention B=" << s.B << " T=" << s.T << " H=" << s.H << " KV=" << s.KV << " hd=" << s.hd
            << ": forward " << fwd_ms << " ms (" << 2 * gemm / fwd_ms * 1e-9 << " TFLOP/s), backward " << bwd_ms
            << " ms (" << 5 * gemm / bwd_ms * 1e-9 << " TFLOP/s)");
    for (cudaEvent_t event : e) cudaEventDestroy(event);
    check_ran_on(ops, impl, 1 + kIters, 1 + kIters);
}

}  // namespace

// Not a check: cuDNN's fused attention on the long shape and on one attention layer of the smollm-360m step
// that `nobubble bench gpu` times (B=8), with the engines cuDNN chose.
TEST_CASE("attention cuDNN: timing (informational)") {
    CudaOps& ops = cuda_ops();
    for (const Shape5 s : {Shape5{1, 2048, 15, 5, 64}, Shape5{8, 2048, 15, 5, 64}})
        print_attention_timing(ops, s, AttentionImpl::cudnn, 1400);
    MESSAGE(attention_report(ops));
}

namespace {

// The same inputs twice, the same bits. The gradients start at zero, so that what is compared is the backward's
// own output (adding it into a prefill would round small differences away). The long shapes give each query row
// many key tiles (2048 / 64): where a backward added partial dQ of the key tiles from many blocks in no fixed
// order (cuDNN's default, non-deterministic backward), dq differs here between runs.
void check_repeatable(AttentionImpl impl) {
    CudaOps& ops = cuda_ops();
    const UseImpl use(ops, impl);
    for (const Shape5 s : {Shape5{2, 200, 6, 2, 64}, Shape5{1, 150, 4, 1, 128}, Shape5{1, 2048, 15, 5, 64},
                           Shape5{8, 2048, 15, 5, 64}}) {
        INFO("B=" << s.B << " T=" << s.T << " H=" << s.H << " KV=" << s.KV << " hd=" << s.hd << " on "
                  << std::string(attention_impl_name(impl)));  // (doctest prints a bare const char* as a pointer)
        const Inputs in = make_inputs(s, 1200);
        const Tensor qd = to_cuda_bf16(in.q, ops), kd = to_cuda_bf16(in.k, ops), vd = to_cuda_bf16(in.v, ops);
        const Tensor dod = to_cuda_bf16(in.dout, ops);
        Tensor out[2], lse[2], dq[2], dk[2], dv[2];
        for (int run = 0; run < 2; ++run) {
            out[run] = ops.activation(in.q_shape());
            lse[run] = ops.f32_zeros(in.lse_shape());
            ops.attention_forward(out[run], lse[run], qd, kd, vd);
            dq[run] = ops.activation(in.q_shape());  // zeros
            dk[run] = ops.activation(in.kv_shape());
            dv[run] = ops.activation(in.kv_shape());
            ops.attention_backward(dq[run], dk[run], dv[run], dod, qd, kd, vd, out[run], lse[run]);
        }
        check_bitwise_equal(out[0], out[1], "out");
        check_bitwise_equal(lse[0], lse[1], "lse");
        check_bitwise_equal(dq[0], dq[1], "dq");
        check_bitwise_equal(dk[0], dk[1], "dk");
        check_bitwise_equal(dv[0], dv[1], "dv");
    }
    check_ran_on(ops, impl, 8, 8);
}

}  // namespace

TEST_CASE("attention: bitwise repeatable (same inputs twice, same bits; hand-written kernels)") {
    check_repeatable(AttentionImpl::kernel);
}
TEST_CASE("attention cuDNN: bitwise repeatable (same inputs twice, same bits; deterministic backward)") {
    check_repeatable(AttentionImpl::cudnn);
}

TEST_CASE("attention: rejects bad shapes and dtypes with std::invalid_argument") {
    CudaOps& ops = cuda_ops();
    const auto bf = [&](const Shape& s) { return ops.activation(s); };
    {  // hd not a multiple of 8
        Tensor q = bf({1, 8, 2, 12}), k = bf({1, 8, 1, 12}), v = bf({1, 8, 1, 12}), out = bf({1, 8, 2, 12});
        Tensor lse = ops.f32_zeros({1, 2, 8});
        CHECK_THROWS_AS(ops.attention_forward(out, lse, q, k, v), std::invalid_argument);
    }
    {  // hd > 128
        Tensor q = bf({1, 8, 2, 136}), k = bf({1, 8, 1, 136}), v = bf({1, 8, 1, 136}), out = bf({1, 8, 2, 136});
        Tensor lse = ops.f32_zeros({1, 2, 8});
        CHECK_THROWS_AS(ops.attention_forward(out, lse, q, k, v), std::invalid_argument);
    }
    {  // H not a multiple of KV
        Tensor q = bf({1, 8, 3, 64}), k = bf({1, 8, 2, 64}), v = bf({1, 8, 2, 64}), out = bf({1, 8, 3, 64});
        Tensor lse = ops.f32_zeros({1, 3, 8});
        CHECK_THROWS_AS(ops.attention_forward(out, lse, q, k, v), std::invalid_argument);
    }
    {  // f32 q; lse of the wrong shape; dk of the wrong shape in backward
        Tensor q = ops.f32_zeros({1, 8, 2, 64}), k = bf({1, 8, 1, 64}), v = bf({1, 8, 1, 64}), out = bf({1, 8, 2, 64});
        Tensor lse = ops.f32_zeros({1, 2, 8});
        CHECK_THROWS_AS(ops.attention_forward(out, lse, q, k, v), std::invalid_argument);
        Tensor qb = bf({1, 8, 2, 64}), bad_lse = ops.f32_zeros({1, 8, 2});
        CHECK_THROWS_AS(ops.attention_forward(out, bad_lse, qb, k, v), std::invalid_argument);
        Tensor dq = bf({1, 8, 2, 64}), dk = bf({1, 8, 2, 64}), dv = bf({1, 8, 1, 64}), dout = bf({1, 8, 2, 64});
        CHECK_THROWS_AS(ops.attention_backward(dq, dk, dv, dout, qb, k, v, out, lse), std::invalid_argument);
    }
}

// Not a check: how fast the fallback kernels are on the long shape.
TEST_CASE("attention: timing of the long shape (informational)") {
    print_attention_timing(cuda_ops(), {1, 2048, 15, 5, 64}, AttentionImpl::kernel, 1300);
}

// Decoding with a KV cache (model/kv_cache.h): rope_forward_at and attention_forward_cached against the CPU. The
// inputs are bf16-rounded on both sides; the GPU sums q.k and P v in f32 and rounds the output to bf16 once, so
// one bf16 rounding (rtol 1e-2) with a small atol for outputs near zero; rope's angle as in the rope test.
TEST_CASE("decode ops (rope_forward_at, attention_forward_cached) match the CPU reference") {
    CudaOps& gpu = cuda_ops();
    CpuOps cpu;
    const int64_t H = 9, KV = 3, hd = 64;
    for (const int64_t first : {int64_t{0}, int64_t{5}, int64_t{700}}) {
        INFO("first_position " << first);
        const Shape shape = {4, KV, hd};
        const Tensor x = bf16_randn(shape, 900 + first);
        Tensor ref = Tensor::zeros(shape);
        cpu.rope_forward_at(ref, x, first, 10000.0f);
        Tensor out = to_cuda_bf16(bf16_randn(shape, 901 + first), gpu);
        gpu.rope_forward_at(out, to_cuda_bf16(x, gpu), first, 10000.0f);
        check_close(out, ref, 4.0 * 8.0 * ((first + 4) * 0x1p-23 + 0x1p-22) + 1e-6, 1e-2, "rope_forward_at");
    }
    for (const auto& [tq, tk] : {std::pair<int64_t, int64_t>{1, 1}, {1, 37}, {5, 200}, {64, 64}}) {
        INFO("Tq " << tq << ", Tk " << tk);
        const Tensor q = bf16_randn({1, tq, H, hd}, 910 + tk), k = bf16_randn({1, tk, KV, hd}, 911 + tk);
        const Tensor v = bf16_randn({1, tk, KV, hd}, 912 + tk);
        Tensor ref = Tensor::zeros({1, tq, H, hd});
        cpu.attention_forward_cached(ref, q, k, v);
        Tensor out = to_cuda_bf16(bf16_randn({1, tq, H, hd}, 913 + tk), gpu);
        gpu.attention_forward_cached(out, to_cuda_bf16(q, gpu), to_cuda_bf16(k, gpu), to_cuda_bf16(v, gpu));
        check_close(out, ref, 2e-2, 1e-2, "attention_forward_cached");
    }
}

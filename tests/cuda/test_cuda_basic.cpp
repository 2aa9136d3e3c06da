// The CUDA backend's infrastructure: device and errors, the caching allocator, cast, add/scale, sum and
// sum_squares, linear (cuBLASLt) forward/backward, AdamW. Skipped (exit 77) without a GPU.
//
// Inputs are random f32 values rounded to bf16 on the host first, so CpuOps (f32) and CudaOps (bf16) see
// the same values; every tolerance is stated and justified where it is used.
#include "tests/cuda/cuda_test_main.h"
#include "tests/cuda/cuda_test_util.h"

#include <cstring>
#include <limits>
#include <vector>

#include "cuda/context.h"
#include "cuda/cuda_check.h"
#include "cuda/gemm_bench.h"
#include "src/core/error.h"

namespace {

constexpr double kU = 1.0 / 16777216.0;  // 2^-24: unit roundoff of f32

Tensor host_values(const std::vector<float>& v) {
    Tensor t = Tensor::zeros({static_cast<int64_t>(v.size())}, DType::f32, Device::cpu);
    std::memcpy(t.data(), v.data(), v.size() * sizeof(float));
    return t;
}

int64_t ulp_distance(float a, float b) {
    int32_t ia, ib;
    std::memcpy(&ia, &a, 4);
    std::memcpy(&ib, &b, 4);
    // Map the sign-magnitude bit patterns onto a monotonic integer line.
    const int64_t la = ia < 0 ? -static_cast<int64_t>(ia & 0x7fffffff) : ia;
    const int64_t lb = ib < 0 ? -static_cast<int64_t>(ib & 0x7fffffff) : ib;
    return la > lb ? la - lb : lb - la;
}

int64_t max_ulp_distance(const Tensor& gpu, const Tensor& cpu, int64_t* differing) {
    const Tensor g = to_host_f32(gpu, cuda_ops());
    const float* pg = g.f32();
    const float* pc = cpu.f32();
    int64_t worst = 0;
    *differing = 0;
    for (int64_t i = 0, n = cpu.numel(); i < n; ++i) {
        const int64_t d = std::isnan(pg[i]) || std::isnan(pc[i]) ? std::numeric_limits<int64_t>::max()
                                                                  : ulp_distance(pg[i], pc[i]);
        if (d != 0) ++*differing;
        if (d > worst) worst = d;
    }
    return worst;
}

}  // namespace

TEST_CASE("device: the backend starts on a real GPU") {
    CudaOps& ops = cuda_ops();
    const CudaContext& c = ops.context();
    MESSAGE("device " << c.device << ": " << c.device_name << ", sm_" << c.compute_capability << ", "
                      << c.multiprocessors << " SMs");
    CHECK(ops.device() == Device::cuda);
    CHECK(ops.activation_dtype() == DType::bf16);
    CHECK(!c.device_name.empty());
    CHECK(c.compute_capability >= 80);  // bf16 tensor cores (the build targets sm_90)
    CHECK(c.multiprocessors > 0);
    CHECK(c.stream != nullptr);
    CHECK(c.lt != nullptr);
    CHECK(c.workspace != nullptr);
    CHECK(c.workspace_bytes >= (size_t{32} << 20));
}

TEST_CASE("errors: CUDA_CHECK and CUBLAS_CHECK throw RuntimeError naming the error") {
    CHECK_THROWS_WITH_AS(CUDA_CHECK(cudaErrorInvalidValue), doctest::Contains("cudaErrorInvalidValue"),
                         RuntimeError);
    CHECK_THROWS_WITH_AS(CUBLAS_CHECK(CUBLAS_STATUS_INVALID_VALUE), doctest::Contains("CUBLAS_STATUS_INVALID_VALUE"),
                         RuntimeError);
    CHECK(cudaGetLastError() == cudaSuccess);
}

TEST_CASE("memory: zeros, host round trip, device copy") {
    cuda_ops();
    Tensor h = randn_host({1000, 3}, 11);
    Tensor d = h.to(Device::cuda);
    CHECK(d.device() == Device::cuda);
    check_bitwise_equal(d.to(Device::cpu), h, "host -> device -> host");
    Tensor d2 = d.clone();  // device -> device
    check_bitwise_equal(d2, h, "device -> device copy");
    Tensor z = Tensor::zeros({777}, DType::bf16, Device::cuda);
    check_bitwise_equal(z, Tensor::zeros({777}, DType::bf16, Device::cpu), "zeros");
    d2.zero();
    check_bitwise_equal(d2, Tensor::zeros({1000, 3}, DType::f32, Device::cpu), "zero()");
    // A view of rows copies only its rows.
    check_bitwise_equal(d.rows(10, 20).to(Device::cpu), h.rows(10, 20).clone(), "rows view");
}

TEST_CASE("memory: a released block is reused for the next allocation of its size, zeroed") {
    cuda_ops();
    const Shape shape = {12345};  // an odd size no other test uses
    void* first = nullptr;
    {
        Tensor t = Tensor::zeros(shape, DType::f32, Device::cuda);
        first = t.data();
        Tensor ones = host_values(std::vector<float>(12345, 1.0f));
        t.copy_from(ones);  // dirty the block
    }
    Tensor again = Tensor::zeros(shape, DType::f32, Device::cuda);
    CHECK(again.data() == first);
    check_bitwise_equal(again, Tensor::zeros(shape, DType::f32, Device::cpu), "reused block is zeroed");
    // Same rounded size (512-byte granules: 12345*4 = 49380 -> 49664 bytes), different dtype: also reused.
    void* second = again.data();
    again = Tensor();
    Tensor other = Tensor::zeros({24690}, DType::bf16, Device::cuda);  // 49380 bytes
    CHECK(other.data() == second);
    CHECK(device_memory_held_bytes() > 0);
}

TEST_CASE("memory: an impossible allocation is a RuntimeError saying out of memory, and CUDA still works") {
    cuda_ops();
    const Shape petabyte = {int64_t{1} << 48};  // 2^48 f32 = 1 PiB
    CHECK_THROWS_WITH_AS(Tensor::zeros(petabyte, DType::f32, Device::cuda), doctest::Contains("out of memory"),
                         RuntimeError);
    set_oom_context("stage 7");
    try {
        Tensor::zeros(petabyte, DType::f32, Device::cuda);
        FAIL("allocating 1 PiB succeeded");
    } catch (const RuntimeError& e) {
        const std::string msg = e.what();
        MESSAGE("OOM message: " << msg);
        CHECK(msg.find("out of memory") != std::string::npos);
        CHECK(msg.find("stage 7") != std::string::npos);
        CHECK(msg.find("MiB free of") != std::string::npos);
    }
    set_oom_context("");
    // The failure left no sticky error: allocation and copies still work.
    Tensor h = randn_host({4096}, 12);
    check_bitwise_equal(h.to(Device::cuda), h, "round trip after OOM");
}

TEST_CASE("cast: f32 -> bf16 rounds to nearest even exactly as the host; bf16 -> f32 is exact; copies") {
    CudaOps& ops = cuda_ops();
    Tensor x = randn_host({3, 1001}, 21, 3.0f);
    // Edge values: signed zeros, ties (1 + 2^-8 rounds down to even, 1 + 3*2^-8 up to even), tiny and subnormal
    // values, large values and one that overflows bf16 to infinity, and infinities.
    const std::vector<float> edges = {0.0f,     -0.0f,    1.0f + 0x1p-8f, 1.0f + 0x3p-8f, -(1.0f + 0x1p-8f),
                                      1e-40f,   -3e-39f,  1e-30f,         3.0e38f,        3.4028235e38f,
                                      INFINITY, -INFINITY, 65504.0f,      -1.5f,          0.1f};
    float* px = x.f32();
    for (size_t i = 0; i < edges.size(); ++i) px[i * 7] = edges[i];
    Tensor xd = to_cuda_f32(x, ops);
    Tensor b = ops.zeros(x.shape(), DType::bf16);
    ops.cast(b, xd);
    check_bitwise_equal(b, to_cuda_bf16(x, ops), "f32 -> bf16 bits vs host round-to-nearest-even");
    Tensor back = ops.zeros(x.shape(), DType::f32);
    ops.cast(back, b);
    Tensor expected = x.clone();
    round_to_bf16(expected);
    check_bitwise_equal(back, expected, "f32 -> bf16 -> f32 equals host rounding");
    // Same-dtype casts are copies; a [3, 1001] cast into a [1001, 3] tensor only needs the element count.
    Tensor f2 = ops.zeros({1001, 3}, DType::f32);
    ops.cast(f2, xd);
    check_bitwise_equal(f2, x, "f32 -> f32 copy");
    Tensor b2 = ops.zeros({3003}, DType::bf16);
    ops.cast(b2, b);
    check_bitwise_equal(b2, b, "bf16 -> bf16 copy");
    Tensor wrong = ops.zeros({5}, DType::f32);
    CHECK_THROWS_AS(ops.cast(wrong, b), std::invalid_argument);
}

TEST_CASE("add_inplace and scale_inplace: f32 exactly as the CPU, bf16 = round(f32 result)") {
    CudaOps& ops = cuda_ops();
    CpuOps cpu;
    const Shape shape = {257, 33};  // not a multiple of the block size
    Tensor a = randn_host(shape, 31), b = randn_host(shape, 32);
    round_to_bf16(a);
    round_to_bf16(b);
    const float s = 0.3f;

    // f32: the same IEEE add and multiply as the CPU, so bit for bit (tolerance 0).
    Tensor ad = to_cuda_f32(a, ops), bd = to_cuda_f32(b, ops);
    ops.add_inplace(ad, bd);
    Tensor ac = a.clone();
    cpu.add_inplace(ac, b);
    check_bitwise_equal(ad, ac, "f32 add");
    ops.scale_inplace(ad, s);
    cpu.scale_inplace(ac, s);
    check_bitwise_equal(ad, ac, "f32 scale");

    // bf16: widened to f32, one f32 operation, rounded to bf16 once: exactly round_bf16(CPU f32 result).
    Tensor ab = to_cuda_bf16(a, ops), bb = to_cuda_bf16(b, ops);
    ops.add_inplace(ab, bb);
    Tensor expected = a.clone();
    cpu.add_inplace(expected, b);
    round_to_bf16(expected);
    check_bitwise_equal(to_host_f32(ab, ops), expected, "bf16 add");
    ops.scale_inplace(ab, s);
    cpu.scale_inplace(expected, s);
    round_to_bf16(expected);
    check_bitwise_equal(to_host_f32(ab, ops), expected, "bf16 scale");

    // a += a (aliasing) works; mismatched dtypes are rejected.
    Tensor aa = to_cuda_f32(a, ops);
    ops.add_inplace(aa, aa);
    Tensor twice = a.clone();
    cpu.scale_inplace(twice, 2.0f);
    check_bitwise_equal(aa, twice, "a += a");
    CHECK_THROWS_AS(ops.add_inplace(aa, ab), std::invalid_argument);
}

TEST_CASE("sum and sum_squares: match the CPU's double sums and repeat bit for bit") {
    CudaOps& ops = cuda_ops();
    CpuOps cpu;
    // Values with a nonzero mean, so the sum is far from 0 and a relative tolerance is meaningful. Both sides
    // add the same values (bf16-representable, hence exact in double) in double, in different orders: the
    // difference is a few double roundings of partial sums, ~n * 2^-53 relative at worst (1e-10 for n = 1e6);
    // 1e-9 relative leaves a margin while still catching any lost or doubled element (>= 1e-7 relative here).
    for (int64_t n : {int64_t{1}, int64_t{5}, int64_t{1000}, int64_t{1000003}, int64_t{4 * 1024 * 1024 + 17}}) {
        CAPTURE(n);
        Tensor x = randn_host({n}, 40 + static_cast<uint64_t>(n));
        for (int64_t i = 0; i < n; ++i) x.f32()[i] += 0.5f;
        round_to_bf16(x);
        const double want_sum = cpu.sum(x), want_sq = cpu.sum_squares(x);
        for (DType dt : {DType::f32, DType::bf16}) {
            CAPTURE(dtype_name(dt));
            Tensor xd = dt == DType::f32 ? to_cuda_f32(x, ops) : to_cuda_bf16(x, ops);
            const double s1 = ops.sum(xd), q1 = ops.sum_squares(xd);
            CHECK(std::fabs(s1 - want_sum) <= 1e-9 * std::fabs(want_sum) + 1e-300);
            CHECK(std::fabs(q1 - want_sq) <= 1e-9 * want_sq);
            // Bitwise repeatable: a second call gives the same double.
            const double s2 = ops.sum(xd), q2 = ops.sum_squares(xd);
            CHECK(std::memcmp(&s1, &s2, sizeof s1) == 0);
            CHECK(std::memcmp(&q1, &q2, sizeof q1) == 0);
        }
    }
    Tensor empty = ops.zeros({0}, DType::f32);
    CHECK(ops.sum(empty) == 0.0);
    CHECK(ops.sum_squares(empty) == 0.0);
}

namespace {

// One linear forward + backward on CUDA vs CpuOps, with pre-filled dx and dw (the += contract).
//
// Tolerances. Both backends see identical bf16-representable inputs, so products are exact in f32 on both
// sides; what differs is (1) the order of the f32 sums, and (2) on the GPU the final rounding of y and dx to
// bf16. (1) For a k-term dot product in f32, any order, the error is at most k * 2^-24 * S where
// S = sum_j |a_j b_j| (Higham's gamma_k bound); the two backends together at most 2 k u S. We allow 3 (k+1) u S
// (margin for tensor-core accumulation that truncates rather than rounds; +1 for the += of C), with S computed
// on the CPU from |inputs|. (2) bf16 rounding to nearest: at most 2^-9 relative (half an ulp of an 8-bit
// significand); we allow rtol = 2^-8 on bf16 outputs. f32 dw has no output rounding beyond (1): rtol = 0.
void check_linear_case(int64_t n, int64_t in, int64_t out, uint64_t seed) {
    CAPTURE(n);
    CAPTURE(in);
    CAPTURE(out);
    CudaOps& ops = cuda_ops();
    CpuOps cpu;
    Tensor x = randn_host({n, in}, seed);
    Tensor w = randn_host({out, in}, seed + 1, 1.0f / std::sqrt(static_cast<float>(in)));
    Tensor dy = randn_host({n, out}, seed + 2);
    Tensor dx0 = randn_host({n, in}, seed + 3);
    Tensor dw0 = randn_host({out, in}, seed + 4);
    round_to_bf16(x);
    round_to_bf16(w);
    round_to_bf16(dy);
    round_to_bf16(dx0);  // dx is bf16 on the GPU: its starting value must be representable

    // CPU reference, and the |.| bounds S.
    Tensor y_ref = Tensor::zeros({n, out});
    cpu.linear_forward(y_ref, x, w);
    Tensor dx_ref = dx0.clone(), dw_ref = dw0.clone();
    cpu.linear_backward(dx_ref, dw_ref, dy, x, w);
    const Tensor ax = abs_host(x), aw = abs_host(w), ady = abs_host(dy);
    Tensor s_y = Tensor::zeros({n, out});
    cpu.linear_forward(s_y, ax, aw);
    Tensor s_dx = abs_host(dx0), s_dw = abs_host(dw0);  // |C| joins the sum of the += output
    cpu.linear_backward(s_dx, s_dw, ady, ax, aw);
    auto scale = [](Tensor& t, double c) {
        float* p = t.f32();
        for (int64_t i = 0, e = t.numel(); i < e; ++i) p[i] = static_cast<float>(c * p[i]);
    };
    scale(s_y, 3.0 * (in + 1) * kU);
    scale(s_dx, 3.0 * (out + 1) * kU);
    scale(s_dw, 3.0 * (n + 1) * kU);

    // CUDA.
    Tensor xd = to_cuda_bf16(x, ops), wd = to_cuda_bf16(w, ops), dyd = to_cuda_bf16(dy, ops);
    Tensor yd = ops.zeros({n, out}, DType::bf16);
    ops.linear_forward(yd, xd, wd);
    check_within(yd, y_ref, s_y, 0x1p-8, "linear_forward y (bf16)");

    Tensor dxd = to_cuda_bf16(dx0, ops), dwd = to_cuda_f32(dw0, ops);
    ops.linear_backward(dxd, dwd, dyd, xd, wd);
    check_within(dxd, dx_ref, s_dx, 0x1p-8, "linear_backward dx += dy W (bf16)");
    check_within(dwd, dw_ref, s_dw, 0.0, "linear_backward dw += dy^T x (f32)");

    // Same inputs, same bits (a cached plan, one algorithm per shape).
    Tensor yd2 = ops.zeros({n, out}, DType::bf16);
    ops.linear_forward(yd2, xd, wd);
    check_bitwise_equal(yd2, yd, "forward repeat");
    Tensor dwd2 = to_cuda_f32(dw0, ops);
    Tensor none;
    ops.linear_backward(none, dwd2, dyd, xd, wd);  // dx undefined: skipped, dw as before
    check_bitwise_equal(dwd2, dwd, "dw with dx undefined (and repeat)");
    Tensor dxd2 = to_cuda_bf16(dx0, ops);
    ops.linear_backward(dxd2, none, dyd, xd, wd);  // dw undefined: skipped
    check_bitwise_equal(dxd2, dxd, "dx with dw undefined (and repeat)");
}

}  // namespace

TEST_CASE("linear: forward and backward vs the CPU, += contract, odd and large shapes") {
    // Each shape on its own: an exception (e.g. no cuBLASLt algorithm) fails that shape and the rest still run.
    CHECK_NOTHROW(check_linear_case(37, 96, 40, 100));      // N not a multiple of 8
    CHECK_NOTHROW(check_linear_case(1, 8, 8, 300));         // a single row
    CHECK_NOTHROW(check_linear_case(64, 128, 256, 400));
    CHECK_NOTHROW(check_linear_case(2048, 576, 1536, 500));  // SmolLM-135M's MLP up-projection at N = 2048
    CHECK_NOTHROW(check_linear_case(13, 17, 9, 200));       // nothing a multiple of 8: 2-byte-aligned rows
}

TEST_CASE("linear: [B, T, in] inputs, row views, and shape / dtype errors") {
    CudaOps& ops = cuda_ops();
    CpuOps cpu;
    Tensor x = randn_host({2, 5, 24}, 600), w = randn_host({16, 24}, 601, 0.2f);
    round_to_bf16(x);
    round_to_bf16(w);
    Tensor xd = to_cuda_bf16(x, ops), wd = to_cuda_bf16(w, ops);
    Tensor y = ops.zeros({2, 5, 16}, DType::bf16);
    ops.linear_forward(y, xd, wd);
    Tensor y_ref = Tensor::zeros({2, 5, 16});
    cpu.linear_forward(y_ref, x, w);
    Tensor bound = abs_host(y_ref);
    {
        Tensor s = Tensor::zeros({2, 5, 16});
        cpu.linear_forward(s, abs_host(x), abs_host(w));
        float* p = s.f32();
        for (int64_t i = 0; i < s.numel(); ++i) p[i] = static_cast<float>(3.0 * 25 * kU * p[i]);
        bound = s;
    }
    check_within(y, y_ref, bound, 0x1p-8, "[B, T, in] forward");
    // A row view starting at an odd row: the buffer is only 2 * 24 * 3 = 144-byte aligned relative to the block
    // (16-byte aligned), so the plan must not assume 256-byte alignment.
    Tensor x_rows = xd.reshaped({10, 24}).rows(3, 10);
    Tensor y_rows = ops.zeros({7, 16}, DType::bf16);
    ops.linear_forward(y_rows, x_rows, wd);
    Tensor y_rows_ref = Tensor::zeros({7, 16});
    cpu.linear_forward(y_rows_ref, x.reshaped({10, 24}).rows(3, 10), w);
    Tensor b_rows = Tensor::zeros({7, 16});
    cpu.linear_forward(b_rows, abs_host(x.reshaped({10, 24}).rows(3, 10).clone()), abs_host(w));
    float* pb = b_rows.f32();
    for (int64_t i = 0; i < b_rows.numel(); ++i) pb[i] = static_cast<float>(3.0 * 25 * kU * pb[i]);
    check_within(y_rows, y_rows_ref, b_rows, 0x1p-8, "row-view forward");

    Tensor bad_y = ops.zeros({10, 15}, DType::bf16);
    CHECK_THROWS_AS(ops.linear_forward(bad_y, xd, wd), std::invalid_argument);
    Tensor f32_y = ops.zeros({2, 5, 16}, DType::f32);
    CHECK_THROWS_AS(ops.linear_forward(f32_y, xd, wd), std::invalid_argument);
    Tensor bad_dw = ops.zeros({16, 24}, DType::bf16);  // dw must be f32
    Tensor dx = ops.zeros({2, 5, 24}, DType::bf16);
    CHECK_THROWS_AS(ops.linear_backward(dx, bad_dw, y, xd, wd), std::invalid_argument);
}

TEST_CASE("gemm bench: the bf16 GEMM rate is measurable") {
    const double tflops = measure_bf16_gemm_tflops(cuda_ops(), 2048, 3);
    MESSAGE("bf16 GEMM 2048^3: " << tflops << " TFLOP/s");
    CHECK(tflops > 1.0);
    CHECK(tflops < 5000.0);
}

TEST_CASE("adamw_update_multi on one tensor: 3 steps match the CPU (torch's arithmetic) to <= 2 ulps") {
    // Both sides compute the same float operations in the same order (explicitly rounded intrinsics on the
    // GPU, fma at the same two points, IEEE sqrt and division), so the results should be identical; the
    // tolerance of 2 ulps per element is only a margin, and the number of differing elements is reported.
    CudaOps& ops = cuda_ops();
    CpuOps cpu;
    const Shape shape = {1000, 103};
    Tensor p = randn_host(shape, 700, 0.05f);
    Tensor m = Tensor::zeros(shape), v = Tensor::zeros(shape);
    Tensor pd = to_cuda_f32(p, ops), md = ops.zeros(shape, DType::f32), vd = ops.zeros(shape, DType::f32);
    for (int64_t step = 1; step <= 3; ++step) {
        CAPTURE(step);
        Tensor g = randn_host(shape, 710 + static_cast<uint64_t>(step), 0.01f);
        g.f32()[0] = 0.0f;  // a zero gradient (v stays 0 on step 1: denom = eps)
        Tensor gd = to_cuda_f32(g, ops);
        cpu.adamw_update_multi({{&p, &g, &m, &v, 0.1f}}, 3e-4f, 0.9f, 0.95f, 1e-8f, step);
        ops.adamw_update_multi({{&pd, &gd, &md, &vd, 0.1f}}, 3e-4f, 0.9f, 0.95f, 1e-8f, step);
        int64_t diff_p = 0, diff_m = 0, diff_v = 0;
        const int64_t ulp_p = max_ulp_distance(pd, p, &diff_p);
        const int64_t ulp_m = max_ulp_distance(md, m, &diff_m);
        const int64_t ulp_v = max_ulp_distance(vd, v, &diff_v);
        MESSAGE("step " << step << ": max ulps p " << ulp_p << " (" << diff_p << " differ), m " << ulp_m << " ("
                        << diff_m << "), v " << ulp_v << " (" << diff_v << ")");
        CHECK(ulp_p <= 2);
        CHECK(ulp_m <= 2);
        CHECK(ulp_v <= 2);
    }
    Tensor bad = ops.zeros(shape, DType::bf16);
    CHECK_THROWS_AS(ops.adamw_update_multi({{&bad, &pd, &md, &vd, 0.0f}}, 1e-3f, 0.9f, 0.95f, 1e-8f, 1),
                    std::invalid_argument);
    CHECK_THROWS_AS(ops.adamw_update_multi({{&pd, &pd, &md, &vd, 0.0f}}, 1e-3f, 0.9f, 0.95f, 1e-8f, 0),
                    std::invalid_argument);
}

TEST_CASE("delay_compensate: f32 and bf16 stale weights match the CPU bit for bit") {
    // grad += ((lambda*grad)*grad)*(w - stale), each operation rounded as on the CPU. A bf16 stale copy widens
    // exactly, so the CPU given the same widened values must agree to the bit.
    CudaOps& ops = cuda_ops();
    CpuOps cpu;
    const Shape shape = {517, 33};
    const Tensor w = randn_host(shape, 801, 0.05f);
    const Tensor stale32 = randn_host(shape, 802, 0.05f);
    const Tensor g0 = randn_host(shape, 803, 0.01f);
    Tensor stale16 = ops.empty(shape, DType::bf16);
    ops.cast(stale16, to_cuda_f32(stale32, ops));
    Tensor stale16_widened = ops.empty(shape, DType::f32);
    ops.cast(stale16_widened, stale16);
    const Tensor stale16_host = stale16_widened.to(Device::cpu);
    for (const bool bf16 : {false, true}) {
        CAPTURE(bf16);
        Tensor g = g0.clone();
        cpu.delay_compensate(g, w, bf16 ? stale16_host : stale32, 0.5f);
        Tensor gd = to_cuda_f32(g0, ops);
        ops.delay_compensate(gd, to_cuda_f32(w, ops), bf16 ? stale16 : to_cuda_f32(stale32, ops), 0.5f);
        int64_t differ = 0;
        CHECK(max_ulp_distance(gd, g, &differ) == 0);
        CHECK(differ == 0);
    }
}

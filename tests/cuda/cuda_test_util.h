// Helpers shared by the CUDA op tests (tests/cuda/test_*.cpp).
//
// The pattern for an op test: random f32 inputs on the host (randn_host), ROUNDED TO BF16 FIRST
// (round_to_bf16) so both backends see the same input values; CpuOps on the rounded f32 tensors, CudaOps on
// to_cuda_bf16 (activations, compute weights) / to_cuda_f32 (f32 statistics, gradients) copies; download
// with to_host_f32 and compare with check_close, stating and justifying the tolerance in the test.
//
// Upload and download convert bf16 on the HOST (round-to-nearest-even on the bit pattern; bf16 -> f32 is
// exact), so these helpers do not depend on any CUDA kernel being right (CudaOps::cast is tested against them).
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "src/cpu/cpu_ops.h"
#include "cuda/cuda_ops.h"
#include "src/core/rng.h"
#include "src/core/tensor.h"

namespace nb::cuda::test {

// The process's one CudaOps (only one per process is supported), created on first use on GPU 0 (or the
// local rank's GPU). Deliberately never destroyed: tearing it down during static destruction would race the
// CUDA runtime's own teardown; the process exit frees the device memory.
inline CudaOps& cuda_ops() {
    static CudaOps* ops = new CudaOps();
    return *ops;
}

// f32 -> bf16 bits, round to nearest, ties to even (what __float2bfloat16_rn does). NaN stays a quiet NaN.
inline uint16_t f32_to_bf16_bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0)  // NaN
        return static_cast<uint16_t>((u >> 16) | 0x0040u);
    const uint32_t lsb = (u >> 16) & 1u;
    u += 0x7fffu + lsb;  // overflow to inf is the correct rounding of values above the largest bf16
    return static_cast<uint16_t>(u >> 16);
}

inline float bf16_bits_to_f32(uint16_t b) {
    const uint32_t u = static_cast<uint32_t>(b) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

inline float round_bf16(float f) { return bf16_bits_to_f32(f32_to_bf16_bits(f)); }

// Normal(0, stddev^2) values from our own Rng (reproducible everywhere).
inline Tensor randn_host(const Shape& shape, uint64_t seed, float stddev = 1.0f) {
    Tensor t = Tensor::zeros(shape, DType::f32, Device::cpu);
    Rng rng(seed);
    float* p = t.f32();
    for (int64_t i = 0, n = t.numel(); i < n; ++i) p[i] = stddev * rng.normal();
    return t;
}

// Uniform in [lo, hi) (e.g. for AdamW's second moment, which must be >= 0).
inline Tensor uniform_host(const Shape& shape, uint64_t seed, float lo, float hi) {
    Tensor t = Tensor::zeros(shape, DType::f32, Device::cpu);
    Rng rng(seed);
    float* p = t.f32();
    for (int64_t i = 0, n = t.numel(); i < n; ++i) p[i] = lo + (hi - lo) * static_cast<float>(rng.uniform());
    return t;
}

// Rounds every element of a host f32 tensor to the nearest bf16 value (kept as f32).
inline void round_to_bf16(Tensor& host_f32) {
    float* p = host_f32.f32();
    for (int64_t i = 0, n = host_f32.numel(); i < n; ++i) p[i] = round_bf16(p[i]);
}

// Normal(0, stddev^2) values rounded to bf16 (kept as f32 on the host): inputs both backends see exactly.
inline Tensor bf16_randn(const Shape& shape, uint64_t seed, float stddev = 1.0f) {
    Tensor t = randn_host(shape, seed, stddev);
    round_to_bf16(t);
    return t;
}

// A host i32 tensor holding `values` (e.g. tokens, targets, expert indices).
inline Tensor i32_host(const Shape& shape, const std::vector<int32_t>& values) {
    Tensor t = Tensor::zeros(shape, DType::i32, Device::cpu);
    REQUIRE(static_cast<size_t>(t.numel()) == values.size());
    std::copy(values.begin(), values.end(), t.i32());
    return t;
}

// A bf16 device tensor holding host_f32 rounded to bf16 (round-to-nearest-even, done on the host).
inline Tensor to_cuda_bf16(const Tensor& host_f32, CudaOps& ops) {
    (void)ops;  // the registered DeviceMemory is ops' allocator
    const float* src = host_f32.f32();
    Tensor staging = Tensor::zeros(host_f32.shape(), DType::bf16, Device::cpu);
    auto* dst = static_cast<uint16_t*>(staging.data());
    for (int64_t i = 0, n = host_f32.numel(); i < n; ++i) dst[i] = f32_to_bf16_bits(src[i]);
    return staging.to(Device::cuda);
}

// An f32 device copy of a host f32 tensor.
inline Tensor to_cuda_f32(const Tensor& host_f32, CudaOps& ops) {
    (void)ops;
    (void)host_f32.f32();  // throws unless host f32
    return host_f32.to(Device::cuda);
}

// A device copy of any host tensor, dtype kept (e.g. i32 tokens and targets).
inline Tensor to_cuda(const Tensor& host, CudaOps& ops) {
    (void)ops;
    return host.to(Device::cuda);
}

// A host f32 tensor with the values of a tensor of any dtype on any device (bf16 widened exactly, i32
// converted). Copies synchronise the backend's stream, so every op issued before is complete.
inline Tensor to_host_f32(const Tensor& any, CudaOps& ops) {
    (void)ops;
    const Tensor host = any.to(Device::cpu);
    if (host.dtype() == DType::f32) return host.device() == any.device() ? host.clone() : host;
    Tensor out = Tensor::zeros(host.shape(), DType::f32, Device::cpu);
    float* dst = out.f32();
    const int64_t n = host.numel();
    if (host.dtype() == DType::bf16) {
        const auto* src = static_cast<const uint16_t*>(host.data());
        for (int64_t i = 0; i < n; ++i) dst[i] = bf16_bits_to_f32(src[i]);
    } else {
        const int32_t* src = host.i32();
        for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(src[i]);
    }
    return out;
}

// Largest |actual - expected| and the corresponding relative error, with where they happen.
struct CloseReport {
    bool ok = true;
    int64_t count_bad = 0;
    int64_t worst = -1;  // index of the element with the largest |a-e| / (atol + rtol |e|)
    double max_abs = 0, max_rel = 0;
    std::string message;
};

inline CloseReport compare_close(const Tensor& actual, const Tensor& expected, double atol, double rtol) {
    CloseReport r;
    const Tensor a = actual.device() == Device::cpu && actual.dtype() == DType::f32 ? actual : to_host_f32(actual, cuda_ops());
    const Tensor e =
        expected.device() == Device::cpu && expected.dtype() == DType::f32 ? expected : to_host_f32(expected, cuda_ops());
    if (a.numel() != e.numel()) {
        r.ok = false;
        r.message = "element counts differ: actual " + shape_string(a.shape()) + " vs expected " + shape_string(e.shape());
        return r;
    }
    const float* pa = a.f32();
    const float* pe = e.f32();
    double worst_ratio = -1;
    for (int64_t i = 0, n = a.numel(); i < n; ++i) {
        const double av = pa[i], ev = pe[i];
        const double diff = std::fabs(av - ev);
        const double bound = atol + rtol * std::fabs(ev);
        // NaN/inf: equal infinities pass, any NaN or a finite/inf mismatch fails.
        bool bad;
        double ratio;
        if (std::isnan(av) || std::isnan(ev) || std::isinf(av) || std::isinf(ev)) {
            bad = !(av == ev);
            ratio = bad ? INFINITY : 0;
        } else {
            bad = diff > bound;
            ratio = bound > 0 ? diff / bound : (diff > 0 ? INFINITY : 0);
            if (diff > r.max_abs) r.max_abs = diff;
            if (ev != 0 && diff / std::fabs(ev) > r.max_rel) r.max_rel = diff / std::fabs(ev);
        }
        if (bad) ++r.count_bad;
        if (ratio > worst_ratio) {
            worst_ratio = ratio;
            r.worst = i;
        }
    }
    r.ok = r.count_bad == 0;
    char buf[512];
    if (r.worst >= 0) {
        std::snprintf(buf, sizeof buf,
                      "%lld of %lld elements out of tolerance (atol %.3g, rtol %.3g); worst [%lld]: actual %.9g "
                      "expected %.9g; max abs err %.3g, max rel err %.3g",
                      static_cast<long long>(r.count_bad), static_cast<long long>(a.numel()), atol, rtol,
                      static_cast<long long>(r.worst), static_cast<double>(pa[r.worst]),
                      static_cast<double>(pe[r.worst]), r.max_abs, r.max_rel);
        r.message = buf;
    } else {
        r.message = "empty tensors";
    }
    return r;
}

// CHECK that |actual - expected| <= atol + rtol * |expected| element-wise (either tensor may be on the device
// or bf16: it is downloaded/widened first). The failure message names the worst element and the max errors.
inline void check_close(const Tensor& actual, const Tensor& expected, double atol, double rtol, const char* what) {
    const CloseReport r = compare_close(actual, expected, atol, rtol);
    INFO(std::string(what) << ": " << r.message);  // (doctest would print a bare const char* as a pointer)
    CHECK(r.ok);
}

// CHECK that |actual - expected| <= bound[i] + rtol * |expected[i]| element-wise, with a per-element absolute
// bound (host f32, same element count): for sums, e.g. bound = c * k * 2^-24 * sum_j |a_j b_j| (the classic
// rounding-error bound of a k-term f32 dot product in any order), computed on the CPU from |inputs|.
inline void check_within(const Tensor& actual, const Tensor& expected, const Tensor& bound, double rtol,
                         const char* what) {
    const Tensor a = to_host_f32(actual, cuda_ops());
    const Tensor e = to_host_f32(expected, cuda_ops());
    const Tensor b = to_host_f32(bound, cuda_ops());
    INFO(std::string(what));
    REQUIRE(a.numel() == e.numel());
    REQUIRE(b.numel() == e.numel());
    const float *pa = a.f32(), *pe = e.f32(), *pb = b.f32();
    int64_t bad = 0, worst = -1;
    double worst_ratio = -1, max_abs = 0;
    for (int64_t i = 0, n = a.numel(); i < n; ++i) {
        const double diff = std::fabs(static_cast<double>(pa[i]) - pe[i]);
        const double lim = static_cast<double>(pb[i]) + rtol * std::fabs(static_cast<double>(pe[i]));
        const bool nan = std::isnan(pa[i]) || std::isnan(pe[i]);
        if (nan || diff > lim) ++bad;
        const double ratio = nan ? INFINITY : (lim > 0 ? diff / lim : (diff > 0 ? INFINITY : 0));
        if (ratio > worst_ratio) {
            worst_ratio = ratio;
            worst = i;
        }
        if (!nan && diff > max_abs) max_abs = diff;
    }
    char buf[512] = "empty tensors";
    if (worst >= 0)
        std::snprintf(buf, sizeof buf,
                      "%lld of %lld elements out of bound (rtol %.3g); worst [%lld]: actual %.9g expected %.9g "
                      "bound %.3g (error / allowed = %.3g); max abs err %.3g",
                      static_cast<long long>(bad), static_cast<long long>(a.numel()), rtol,
                      static_cast<long long>(worst), static_cast<double>(pa[worst]), static_cast<double>(pe[worst]),
                      static_cast<double>(pb[worst]) + rtol * std::fabs(static_cast<double>(pe[worst])), worst_ratio,
                      max_abs);
    INFO(buf);
    CHECK(bad == 0);
}

// ||actual - expected|| / ||expected|| (Frobenius; 1e-30 floors the denominator), actual on either device and of
// any dtype (downloaded and widened first), expected host f32: for whole-model and whole-layer comparisons.
inline double relative_frobenius(const Tensor& actual_any, const Tensor& expected) {
    const Tensor actual = to_host_f32(actual_any, cuda_ops());
    double diff = 0, ref = 0;
    for (int64_t i = 0; i < expected.numel(); ++i) {
        const double d = static_cast<double>(actual.f32()[i]) - expected.f32()[i];
        diff += d * d;
        ref += static_cast<double>(expected.f32()[i]) * expected.f32()[i];
    }
    return std::sqrt(diff) / std::max(std::sqrt(ref), 1e-30);
}

// Element-wise |x| of a host f32 tensor (a new tensor), for error bounds.
inline Tensor abs_host(const Tensor& host_f32) {
    Tensor out = host_f32.clone();
    float* p = out.f32();
    for (int64_t i = 0, n = out.numel(); i < n; ++i) p[i] = std::fabs(p[i]);
    return out;
}

// CHECK that two tensors hold the same bits (same dtype and size; either device).
inline void check_bitwise_equal(const Tensor& a, const Tensor& b, const char* what) {
    INFO(std::string(what));
    REQUIRE(a.dtype() == b.dtype());
    REQUIRE(a.numel() == b.numel());
    const Tensor ha = a.to(Device::cpu);
    const Tensor hb = b.to(Device::cpu);
    const auto* pa = static_cast<const unsigned char*>(ha.data());
    const auto* pb = static_cast<const unsigned char*>(hb.data());
    const size_t bytes = a.bytes();
    size_t first = bytes;
    for (size_t i = 0; i < bytes; ++i)
        if (pa[i] != pb[i]) {
            first = i;
            break;
        }
    INFO("first differing byte " << first << " of " << bytes);
    CHECK(first == bytes);
}

}  // namespace nb::cuda::test

// Test files are one translation unit per binary: bring the names in so tests read plainly.
using namespace nb;               // NOLINT
using namespace nb::cuda;         // NOLINT
using namespace nb::cuda::test;   // NOLINT

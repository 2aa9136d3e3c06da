// Finite-difference gradient checks for the op tests, plus the small helpers they share.
//
// The pattern: pick random inputs and a random cotangent R, take the scalar objective L = sum(out * R) (in
// double), run the op's backward with dout = R, and compare each analytic gradient element with the central
// difference (L(x + h) - L(x - h)) / (2h). The step actually taken is measured after rounding x +- h to float,
// so float spacing near x does not bias the quotient.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "src/core/tensor.h"

namespace nb::test {

// A tensor of independent N(0, stddev^2) floats.
inline Tensor randn(const Shape& shape, std::mt19937& rng, float stddev = 1.0f) {
    Tensor t = Tensor::zeros(shape);
    std::normal_distribution<float> dist(0.0f, stddev);
    float* p = t.f32();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = dist(rng);
    return t;
}

// An i32 tensor of ids uniform in [0, vocab).
inline Tensor rand_ids(const Shape& shape, int32_t vocab, std::mt19937& rng) {
    Tensor t = Tensor::zeros(shape, DType::i32);
    std::uniform_int_distribution<int32_t> dist(0, vocab - 1);
    int32_t* p = t.i32();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = dist(rng);
    return t;
}

// sum_i a[i] * b[i] in double: the objective L = sum(out * R).
inline double dot(const Tensor& a, const Tensor& b) {
    REQUIRE(a.numel() == b.numel());
    const float *pa = a.f32(), *pb = b.f32();
    double acc = 0.0;
    for (int64_t i = 0; i < a.numel(); ++i) acc += static_cast<double>(pa[i]) * pb[i];
    return acc;
}

// Largest |a - b| / max(1, |b|) over all elements (b is the reference).
inline double max_rel_diff(const Tensor& a, const Tensor& b) {
    REQUIRE(a.numel() == b.numel());
    const float *pa = a.f32(), *pb = b.f32();
    double worst = 0.0;
    for (int64_t i = 0; i < a.numel(); ++i) {
        const double d =
            std::fabs(static_cast<double>(pa[i]) - pb[i]) / std::max(1.0, std::fabs(static_cast<double>(pb[i])));
        worst = std::max(worst, std::isnan(d) ? std::numeric_limits<double>::infinity() : d);
    }
    return worst;
}

// Same, against a double reference.
inline double max_rel_diff(const Tensor& a, const std::vector<double>& ref) {
    REQUIRE(a.numel() == static_cast<int64_t>(ref.size()));
    const float* pa = a.f32();
    double worst = 0.0;
    for (size_t i = 0; i < ref.size(); ++i) {
        const double d = std::fabs(pa[i] - ref[i]) / std::max(1.0, std::fabs(ref[i]));
        worst = std::max(worst, std::isnan(d) ? std::numeric_limits<double>::infinity() : d);
    }
    return worst;
}

// The objective L = sum(out * R) of an op whose output has R's shape: `forward` writes the op's output into a
// fresh zero tensor, reading the inputs fd_compare perturbs in place. R must outlive the objective.
inline std::function<double()> dot_objective(const Tensor& R, std::function<void(Tensor& out)> forward) {
    return [&R, forward = std::move(forward)] {
        Tensor out = Tensor::zeros(R.shape());
        forward(out);
        return dot(out, R);
    };
}

inline bool bitwise_equal(const Tensor& a, const Tensor& b) {
    if (a.numel() != b.numel() || a.dtype() != b.dtype()) return false;
    return std::equal(a.f32(), a.f32() + a.numel(), b.f32(), [](float x, float y) {
        uint32_t ux, uy;
        std::memcpy(&ux, &x, 4);
        std::memcpy(&uy, &y, 4);
        return ux == uy;
    });
}

// Indices to check: all of them when there are at most max_samples, else a fixed-seed sample without repeats.
inline std::vector<int64_t> sample_indices(int64_t n, int64_t max_samples, std::mt19937& rng) {
    std::vector<int64_t> idx(static_cast<size_t>(n));
    std::iota(idx.begin(), idx.end(), int64_t{0});
    if (n > max_samples) {
        std::shuffle(idx.begin(), idx.end(), rng);
        idx.resize(static_cast<size_t>(max_samples));
        std::sort(idx.begin(), idx.end());
    }
    return idx;
}

struct FdOptions {
    double h = 1e-2;            // step; the objective is evaluated at x +- h
    double tol = 1e-2;          // pass when |analytic - numeric| <= tol * max(1, |numeric|)
    int64_t max_samples = 512;  // elements checked per tensor
};

struct FdResult {
    int64_t checked = 0, failures = 0;
    double worst_error = 0.0;  // the largest |a - n| / max(1, |n|)
    int64_t worst_index = -1;
    double worst_analytic = 0.0, worst_numeric = 0.0;
    double max_abs_numeric = 0.0;  // so a test can see the gradient was not trivially zero
};

// Compares analytic[i] with the central difference of objective() in x[i] for sampled i. x is perturbed in place
// and restored; objective() must recompute from x.
inline FdResult fd_compare(Tensor& x, const Tensor& analytic, const std::function<double()>& objective,
                           std::mt19937& rng, const FdOptions& opt = {}) {
    REQUIRE(x.numel() == analytic.numel());
    FdResult r;
    float* xp = x.f32();
    const float* ap = analytic.f32();
    for (int64_t i : sample_indices(x.numel(), opt.max_samples, rng)) {
        const float x0 = xp[i];
        const float xplus = static_cast<float>(x0 + opt.h), xminus = static_cast<float>(x0 - opt.h);
        xp[i] = xplus;
        const double lplus = objective();
        xp[i] = xminus;
        const double lminus = objective();
        xp[i] = x0;
        const double numeric = (lplus - lminus) / (static_cast<double>(xplus) - xminus);
        const double err = std::fabs(ap[i] - numeric) / std::max(1.0, std::fabs(numeric));
        ++r.checked;
        r.max_abs_numeric = std::max(r.max_abs_numeric, std::fabs(numeric));
        if (!(err <= opt.tol)) ++r.failures;
        if (!(err <= r.worst_error)) {
            r.worst_error = err;
            r.worst_index = i;
            r.worst_analytic = ap[i];
            r.worst_numeric = numeric;
        }
    }
    return r;
}

// fd_compare with the verdict as doctest assertions, naming the tensor and its worst element on failure.
inline FdResult fd_check(const std::string& name, Tensor& x, const Tensor& analytic,
                         const std::function<double()>& objective, std::mt19937& rng, const FdOptions& opt = {}) {
    const FdResult r = fd_compare(x, analytic, objective, rng, opt);
    INFO("gradient of ", name, ": ", r.failures, " of ", r.checked, " elements off; worst at ", r.worst_index,
         ": analytic ", r.worst_analytic, " vs numeric ", r.worst_numeric, " (rel err ", r.worst_error, ")");
    CHECK(r.checked > 0);
    CHECK(r.failures == 0);
    CHECK(r.max_abs_numeric > 1e-3);  // a gradient that is zero everywhere checks nothing
    return r;
}

}  // namespace nb::test

// The squared singular values of a host f32 matrix, for the Newton-Schulz tests (tests/unit/test_newton_schulz.cpp,
// tests/cuda/test_cuda_optimizers.cpp): what "every singular value lands in the band" is checked on.
#pragma once

#include <cstdint>
#include <vector>

#include "src/cpu/blas_lapack.h"

namespace nb::test {

// The squared singular values of x [r, c] (row-major, r <= c): the eigenvalues of x x^T, descending, each taken as
// the Rayleigh quotient v^T (x x^T) v of its eigenvector v (in double).
inline std::vector<float> squared_singular_values(const float* x, int64_t r, int64_t c) {
    std::vector<float> gram(static_cast<size_t>(r * r)), vectors(static_cast<size_t>(r * r));
    linalg::gemm(false, true, r, r, c, 1.0f, x, x, 0.0f, gram.data());
    linalg::symmetric_eigenvectors_descending(r, gram.data(), vectors.data());
    std::vector<float> values;  // v_i^T G v_i for each eigenvector (column i)
    for (int64_t i = 0; i < r; ++i) {
        double value = 0;
        for (int64_t a = 0; a < r; ++a)
            for (int64_t b = 0; b < r; ++b)
                value += static_cast<double>(vectors[a * r + i]) * gram[a * r + b] * vectors[b * r + i];
        values.push_back(static_cast<float>(value));
    }
    return values;
}

}  // namespace nb::test

#include "src/cpu/newton_schulz.h"

#include <cmath>
#include <vector>

#include "src/cpu/cpu_ops.h"
#include "src/cpu/blas_lapack.h"
#include "src/ops/optimizer_checks.h"

namespace nb {

namespace {

constexpr float kA = 3.4445f, kB = -4.7750f, kC = 2.0315f;

// x[r, c] (r <= c) in place: `steps` iterations of X <- a X + (b A + c A A) X with A = X X^T.
void iterate(std::vector<float>& x, int64_t r, int64_t c, int steps) {
    std::vector<float> a(static_cast<size_t>(r * r)), b(static_cast<size_t>(r * r)), next(x.size());
    for (int s = 0; s < steps; ++s) {
        linalg::gemm(false, true, r, r, c, 1.0f, x.data(), x.data(), 0.0f, a.data());  // A = X X^T
        b = a;
        linalg::gemm(false, false, r, r, r, kC, a.data(), a.data(), kB, b.data());    // B = b A + c A A
        next = x;
        linalg::gemm(false, false, r, c, r, 1.0f, b.data(), x.data(), kA, next.data());  // a X + B X
        x.swap(next);
    }
}

}  // namespace

void newton_schulz5(const float* g, float* out, int64_t rows, int64_t cols, int steps) {
    const bool transpose = rows > cols;
    const int64_t r = transpose ? cols : rows, c = transpose ? rows : cols;
    std::vector<float> x(static_cast<size_t>(rows * cols));
    double norm_sq = 0;
    for (int64_t i = 0; i < rows * cols; ++i) norm_sq += static_cast<double>(g[i]) * g[i];
    const float norm = static_cast<float>(std::sqrt(norm_sq)) + 1e-7f;
    for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) {
            const float v = g[i * cols + j] / norm;
            if (transpose) x[j * rows + i] = v;
            else x[i * cols + j] = v;
        }
    iterate(x, r, c, steps);
    for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) out[i * cols + j] = transpose ? x[j * rows + i] : x[i * cols + j];
}

// The batch is only a calling convention here: each matrix is its own f32 problem.
void CpuOps::newton_schulz(const std::vector<Tensor*>& outs, const std::vector<const Tensor*>& ins, int steps) {
    const OpTimer timer(*this, "newton_schulz");
    const MatrixBatch batch = check_matrix_batch("newton_schulz", Device::cpu, outs, ins);
    for (size_t i = 0; i < ins.size(); ++i)
        newton_schulz5(ins[i]->f32(), outs[i]->f32(), batch.rows, batch.cols, steps);
}

}  // namespace nb

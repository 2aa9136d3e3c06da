// The CPU backend's matrix products and factorizations for the optimizers (src/ops/ops.h, "linear algebra for
// optimizers"): thin wrappers over src/cpu/blas_lapack.h, which calls the tiled sgemm and LAPACK's ssyevd (dsyevd as
// the fallback), sgeqrf and sorgqr. OpenBLAS always runs on one thread (src/cpu/cpu_threads.h), so no bit depends
// on the thread count.
#include "src/cpu/cpu_ops.h"
#include "src/ops/linalg_checks.h"
#include "src/cpu/blas_lapack.h"

namespace nb {

using namespace linalg_checks;

// c[m,n] = alpha op(a) op(b) + beta c
void CpuOps::matmul(Tensor& c, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, float alpha,
                    float beta) {
    const OpTimer timer(*this, "matmul");
    const MatmulDims d = check_matmul(c, a, b, trans_a, trans_b, Device::cpu);
    if (d.m == 0 || d.n == 0) return;
    linalg::gemm(trans_a, trans_b, d.m, d.n, d.k, alpha, a.f32(), b.f32(), beta, c.f32());
}

// Columns of `vectors`: eigenvectors of a's lower triangle, largest eigenvalue first.
void CpuOps::symmetric_eigenvectors_descending(Tensor& vectors, const Tensor& a) {
    const OpTimer timer(*this, "symmetric_eigenvectors_descending");
    const int64_t n = check_factorization("symmetric_eigenvectors_descending", "vectors", vectors, a, Device::cpu);
    linalg::symmetric_eigenvectors_descending(n, a.f32(), vectors.f32());
}

// q = Q of a = Q R
void CpuOps::qr_orthonormal(Tensor& q, const Tensor& a) {
    const OpTimer timer(*this, "qr_orthonormal");
    const int64_t n = check_factorization("qr_orthonormal", "q", q, a, Device::cpu);
    linalg::qr_orthonormal(n, a.f32(), q.f32());
}

}  // namespace nb

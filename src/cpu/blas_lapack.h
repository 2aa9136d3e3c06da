// Host linear algebra for the optimizers that need more than element-wise arithmetic (Muon's Newton-Schulz
// iteration, SOAP's projections and eigenbases): row-major f32 matrices in plain arrays.
//
// The products are tiled sgemms (src/cpu/tiled_gemm.h), as the CPU backend's linear layer's, with the same
// thread-count independence. The factorizations are LAPACK's, on one OpenBLAS thread (src/cpu/cpu_threads.h),
// from the same OpenBLAS library (it exports the LAPACK routines), declared here by hand so that no extra
// header package is needed.
#pragma once

#include <cstdint>
#include <vector>

namespace nb::linalg {

// C[m,n] = alpha * op(A) op(B) + beta * C, with op(A) [m,k] and op(B) [k,n]; op(X) = X^T when trans_X.
// A is stored [m,k] (or [k,m] when trans_a), B [k,n] (or [n,k] when trans_b), all row-major and dense.
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, const float* b,
          float beta, float* c);

// The eigenvectors of the symmetric n x n matrix `a` (row-major), as the COLUMNS of the row-major n x n matrix
// `vectors`, orthonormal and ordered by descending eigenvalue (column 0 belongs to the largest).
// Only the lower triangle of `a` (a[i*n + j], i >= j) is read, as torch.linalg.eigh does by default, so a matrix
// that is symmetric only up to rounding gives the same answer as there.
// LAPACK ssyevd (divide and conquer); if it does not converge, dsyevd on a double copy; if that fails too,
// nb::RuntimeError naming the routine and its info code. Signs of the eigenvectors are LAPACK's (arbitrary).
void symmetric_eigenvectors_descending(int64_t n, const float* a, float* vectors);

// The orthonormal factor Q (n x n, row-major) of the Householder QR decomposition a = Q R of the square
// row-major matrix `a` (LAPACK sgeqrf + sorgqr, as torch.linalg.qr on the CPU). Signs: LAPACK's.
void qr_orthonormal(int64_t n, const float* a, float* q);

}  // namespace nb::linalg

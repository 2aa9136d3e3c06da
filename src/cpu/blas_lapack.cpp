#include "src/cpu/blas_lapack.h"

#include <algorithm>
#include <cstddef>
#include <limits>
#include <stdexcept>

#include <fmt/format.h>

#include "src/core/error.h"
#include "src/cpu/cpu_threads.h"
#include "src/cpu/tiled_gemm.h"

// LAPACK's Fortran entry points, as OpenBLAS exports them (32-bit integers: the non-ILP64 build that
// find_library(openblas) picks). Character arguments carry gfortran's hidden lengths at the end; the routines
// ignore them for one-character flags, but passing them keeps the calls correct for either convention.
extern "C" {
void ssyevd_(const char* jobz, const char* uplo, const int* n, float* a, const int* lda, float* w, float* work,
             const int* lwork, int* iwork, const int* liwork, int* info, size_t jobz_len, size_t uplo_len);
void dsyevd_(const char* jobz, const char* uplo, const int* n, double* a, const int* lda, double* w, double* work,
             const int* lwork, int* iwork, const int* liwork, int* info, size_t jobz_len, size_t uplo_len);
void sgeqrf_(const int* m, const int* n, float* a, const int* lda, float* tau, float* work, const int* lwork,
             int* info);
void sorgqr_(const int* m, const int* n, const int* k, float* a, const int* lda, const float* tau, float* work,
             const int* lwork, int* info);
}

namespace nb::linalg {

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, const float* b,
          float beta, float* c) {
    const int64_t lda = trans_a ? m : k, ldb = trans_b ? k : n;
    cpu::sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, n);
}

// LAPACK counts in int; a matrix side past that would overflow its index arithmetic long before.
static int lapack_size(int64_t n, const char* what) {
    if (n < 0 || n > std::numeric_limits<int>::max() / 2)
        throw std::logic_error(fmt::format("linalg::{}: matrix side {} out of range", what, n));
    return static_cast<int>(n);
}

// A LAPACK workspace query answers in the routine's floating type; round up so that a size just past 2^24
// (not representable in float) is never truncated.
template <typename T>
static int workspace_size(T query) {
    return std::max(1, static_cast<int>(static_cast<double>(query) + 0.5) + 1);
}

// syevd on a column-major copy `m` (overwritten with the eigenvectors as columns, ascending eigenvalues).
// Returns LAPACK's info. uplo 'U' of the column-major view is the lower triangle of the row-major input.
template <typename T, typename Fn>
static int syevd(Fn routine, int n, std::vector<T>& m) {
    const char jobz = 'V', uplo = 'U';
    std::vector<T> w(static_cast<size_t>(n));
    T work_query = 0;
    int iwork_query = 0, lwork = -1, liwork = -1, info = 0;
    routine(&jobz, &uplo, &n, m.data(), &n, w.data(), &work_query, &lwork, &iwork_query, &liwork, &info, 1, 1);
    if (info != 0) return info;
    lwork = workspace_size(work_query);
    liwork = std::max(1, iwork_query);
    std::vector<T> work(static_cast<size_t>(lwork));
    std::vector<int> iwork(static_cast<size_t>(liwork));
    routine(&jobz, &uplo, &n, m.data(), &n, w.data(), work.data(), &lwork, iwork.data(), &liwork, &info, 1, 1);
    return info;
}

void symmetric_eigenvectors_descending(int64_t n64, const float* a, float* vectors) {
    cpu::use_single_threaded_blas();  // LAPACK's blocked routines would split their sums over OpenBLAS's threads
    const int n = lapack_size(n64, "symmetric_eigenvectors_descending");
    if (n == 0) return;
    const size_t nn = static_cast<size_t>(n) * static_cast<size_t>(n);
    // The row-major buffer read column-major is a^T; syevd overwrites it, so work on a copy.
    std::vector<float> m(a, a + nn);
    int info = syevd<float>(ssyevd_, n, m);
    if (info != 0) {
        // Single precision failed to converge (it happens with badly scaled or clustered spectra): double has
        // the range and precision that the reference implementation falls back to as well.
        const int single_info = info;
        std::vector<double> md(a, a + nn);
        info = syevd<double>(dsyevd_, n, md);
        if (info != 0)
            throw RuntimeError(fmt::format("eigendecomposition of a {}x{} matrix failed: ssyevd info {}, "
                                           "dsyevd info {}", n, n, single_info, info));
        for (size_t i = 0; i < nn; ++i) m[i] = static_cast<float>(md[i]);
    }
    // LAPACK's eigenvector k (ascending) is column k of the column-major result: m[k*n + i] is its component i.
    // Output column j is eigenvector n-1-j, so that the largest eigenvalue comes first.
    const size_t un = static_cast<size_t>(n);
    for (size_t i = 0; i < un; ++i)
        for (size_t j = 0; j < un; ++j) vectors[i * un + j] = m[(un - 1 - j) * un + i];
}

void qr_orthonormal(int64_t n64, const float* a, float* q) {
    cpu::use_single_threaded_blas();  // LAPACK's blocked routines would split their sums over OpenBLAS's threads
    const int n = lapack_size(n64, "qr_orthonormal");
    if (n == 0) return;
    const size_t un = static_cast<size_t>(n);
    // Column-major copy of a: element (i, j) at [j*n + i].
    std::vector<float> m(un * un);
    for (size_t i = 0; i < un; ++i)
        for (size_t j = 0; j < un; ++j) m[j * un + i] = a[i * un + j];
    std::vector<float> tau(un);
    float query = 0;
    int lwork = -1, info = 0;
    sgeqrf_(&n, &n, m.data(), &n, tau.data(), &query, &lwork, &info);
    if (info != 0) throw RuntimeError(fmt::format("QR of a {}x{} matrix: sgeqrf info {}", n, n, info));
    float query2 = 0;
    sorgqr_(&n, &n, &n, m.data(), &n, tau.data(), &query2, &lwork, &info);
    if (info != 0) throw RuntimeError(fmt::format("QR of a {}x{} matrix: sorgqr info {}", n, n, info));
    lwork = std::max(workspace_size(query), workspace_size(query2));
    std::vector<float> work(static_cast<size_t>(lwork));
    sgeqrf_(&n, &n, m.data(), &n, tau.data(), work.data(), &lwork, &info);
    if (info != 0) throw RuntimeError(fmt::format("QR of a {}x{} matrix: sgeqrf info {}", n, n, info));
    sorgqr_(&n, &n, &n, m.data(), &n, tau.data(), work.data(), &lwork, &info);
    if (info != 0) throw RuntimeError(fmt::format("QR of a {}x{} matrix: sorgqr info {}", n, n, info));
    for (size_t i = 0; i < un; ++i)
        for (size_t j = 0; j < un; ++j) q[i * un + j] = m[j * un + i];
}

}  // namespace nb::linalg

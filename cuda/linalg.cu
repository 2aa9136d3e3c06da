// Matrix products and factorizations on f32 optimizer state (src/ops/ops.h, "linear algebra for optimizers"):
// cuBLAS for matmul, cuSOLVER for the eigenvectors and the QR factor. The only file that includes cuSOLVER.
//
// Layout. Our matrices are row-major; cuBLAS and cuSOLVER are column-major. A row-major buffer of X read
// column-major is X^T, which is all that is needed:
// - matmul: row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T, so the call swaps the operands
//   and keeps each one's transpose flag and leading dimension (its row length).
// - eigenvectors: the symmetric A's buffer read column-major is A^T; its UPPER triangle is A's lower one, the
//   triangle torch.linalg.eigh and the CPU (LAPACK, src/cpu/lapack.cpp) read. syevd returns the eigenvectors as
//   the columns of a column-major matrix, ascending: eigenvector k, component i at [k*n + i]. The output kernel
//   writes row-major vectors[i, j] = eigenvector n-1-j component i, so column 0 is the largest eigenvalue's.
// - QR: the buffer read column-major would be A^T, and QR(A^T) is not what we want, so A is first transposed
//   into a column-major copy (copy[j*n + i] = A[i, j]); geqrf + orgqr overwrite it with Q, column-major; the
//   same transpose writes Q back row-major. Householder QR as LAPACK's: the same Q up to the signs of columns.
//
// Precision. matmul runs with CUBLAS_COMPUTE_32F_PEDANTIC: f32 products and sums, never TF32 or reduced
// precision, whatever math mode a handle may have. Results agree with the CPU's to f32 rounding, not bit for
// bit (the summation orders differ).
//
// Determinism. cuBLAS with atomics disallowed (its default, set anyway) and cuSOLVER in
// CUSOLVER_DETERMINISTIC_RESULTS give the same bits for the same inputs on the same GPU model and library
// version; the small layout kernels here have one thread per output element.
//
// Workspaces come from the *_bufferSize queries, buffers from the caching allocator (stream ordered, so freeing
// them while the stream still works on them is safe). After each factorization devInfo is copied to the host
// (one stream synchronisation) and reported.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cusolverDn.h>

#include <algorithm>
#include <climits>
#include <memory>
#include <string>
#include <utility>

#include "cuda/context.h"
#include "cuda/cuda_check.h"
#include "cuda/cuda_ops.h"
#include "cuda/grid_stride.cuh"
#include "src/core/error.h"
#include "src/ops/linalg_checks.h"

namespace nb::cuda {

// The handles live as long as the context; created on the first use (most runs never call these ops).
struct LinalgHandles {
    cublasHandle_t blas = nullptr;
    cusolverDnHandle_t solver = nullptr;
    LinalgHandles() = default;
    LinalgHandles(const LinalgHandles&) = delete;
    LinalgHandles& operator=(const LinalgHandles&) = delete;
    ~LinalgHandles() {
        if (solver) cusolverDnDestroy(solver);
        if (blas) cublasDestroy(blas);
    }
};

void destroy_linalg_handles(LinalgHandles* handles) noexcept { delete handles; }

namespace {

using namespace linalg_checks;

const char* cusolver_status_name(cusolverStatus_t s) {
    switch (s) {
        case CUSOLVER_STATUS_SUCCESS: return "CUSOLVER_STATUS_SUCCESS";
        case CUSOLVER_STATUS_NOT_INITIALIZED: return "CUSOLVER_STATUS_NOT_INITIALIZED";
        case CUSOLVER_STATUS_ALLOC_FAILED: return "CUSOLVER_STATUS_ALLOC_FAILED";
        case CUSOLVER_STATUS_INVALID_VALUE: return "CUSOLVER_STATUS_INVALID_VALUE";
        case CUSOLVER_STATUS_ARCH_MISMATCH: return "CUSOLVER_STATUS_ARCH_MISMATCH";
        case CUSOLVER_STATUS_EXECUTION_FAILED: return "CUSOLVER_STATUS_EXECUTION_FAILED";
        case CUSOLVER_STATUS_INTERNAL_ERROR: return "CUSOLVER_STATUS_INTERNAL_ERROR";
        case CUSOLVER_STATUS_MATRIX_TYPE_NOT_SUPPORTED: return "CUSOLVER_STATUS_MATRIX_TYPE_NOT_SUPPORTED";
        case CUSOLVER_STATUS_NOT_SUPPORTED: return "CUSOLVER_STATUS_NOT_SUPPORTED";
        case CUSOLVER_STATUS_INVALID_WORKSPACE: return "CUSOLVER_STATUS_INVALID_WORKSPACE";
        default: return "unknown cuSOLVER status";
    }
}

[[noreturn]] void throw_cusolver_error(cusolverStatus_t status, const char* what, int line) {
    throw RuntimeError(std::string("cuSOLVER error: ") + what + " failed: " + cusolver_status_name(status) + " (" +
                       std::to_string(static_cast<int>(status)) + ") at linalg.cu:" + std::to_string(line));
}

#define CUSOLVER_CHECK(call)                                                                    \
    do {                                                                                        \
        cusolverStatus_t nb_st_ = (call);                                                       \
        if (nb_st_ != CUSOLVER_STATUS_SUCCESS) throw_cusolver_error(nb_st_, #call, __LINE__); \
    } while (0)

LinalgHandles& handles(CudaContext& ctx) {
    if (ctx.linalg) return *ctx.linalg;
    auto h = std::make_unique<LinalgHandles>();  // a failure half way destroys what was created
    CUBLAS_CHECK(cublasCreate(&h->blas));
    CUBLAS_CHECK(cublasSetStream(h->blas, ctx.stream));
    CUBLAS_CHECK(cublasSetPointerMode(h->blas, CUBLAS_POINTER_MODE_HOST));
    CUBLAS_CHECK(cublasSetAtomicsMode(h->blas, CUBLAS_ATOMICS_NOT_ALLOWED));
    CUBLAS_CHECK(cublasSetMathMode(h->blas, CUBLAS_PEDANTIC_MATH));  // belt and braces: the compute type says so too
    CUSOLVER_CHECK(cusolverDnCreate(&h->solver));
    CUSOLVER_CHECK(cusolverDnSetStream(h->solver, ctx.stream));
    CUSOLVER_CHECK(cusolverDnSetDeterministicMode(h->solver, CUSOLVER_DETERMINISTIC_RESULTS));
    ctx.linalg = h.release();
    return *ctx.linalg;
}

// cuBLAS and cuSOLVER count in int.
int library_size(int64_t n, const char* op) {
    if (n < 0 || n > INT_MAX) fail(op, "size " + std::to_string(n) + " exceeds the library's int range");
    return static_cast<int>(n);
}

// A device buffer of `count` elements of T from the caching allocator, kept alive by its Tensor.
template <class T>
struct DeviceBuffer {
    Tensor storage;
    T* ptr;
};
template <class T>
DeviceBuffer<T> device_buffer(int64_t count) {
    static_assert(sizeof(T) % sizeof(float) == 0, "stored as f32 words");
    const int64_t words = std::max<int64_t>(1, count) * static_cast<int64_t>(sizeof(T) / sizeof(float));
    Tensor t = Tensor::empty({words}, DType::f32, Device::cuda);
    T* p = static_cast<T*>(t.data());
    return {std::move(t), p};
}

// devInfo values, copied to the host (synchronises the stream: every call before has finished).
void read_infos(CudaContext& ctx, const int* device_infos, int* host_infos, int count) {
    CUDA_CHECK(cudaMemcpyAsync(host_infos, device_infos, sizeof(int) * static_cast<size_t>(count),
                               cudaMemcpyDeviceToHost, ctx.stream));
    CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
}

// dst[j*n + i] = src[i*n + j] for a square n x n matrix: row-major <-> column-major (its own inverse).
__global__ void transpose_square(float* __restrict__ dst, const float* __restrict__ src, int64_t n) {
    for (int64_t e = first_element(); e < n * n; e += element_stride()) {
        const int64_t i = e / n, j = e % n;
        dst[j * n + i] = src[e];
    }
}

// dst[e] = T(src[e]): the working copy a syevd overwrites (float: a copy; double: exact widening).
template <class T>
__global__ void widen(T* __restrict__ dst, const float* __restrict__ src, int64_t count) {
    for (int64_t e = first_element(); e < count; e += element_stride()) dst[e] = static_cast<T>(src[e]);
}

// vectors[i*n + j] = float(m[(n-1-j)*n + i]): column-major eigenvectors ascending -> row-major columns
// descending (double rounds to nearest, as the CPU's static_cast).
template <class T>
__global__ void descending_columns(float* __restrict__ vectors, const T* __restrict__ m, int64_t n) {
    for (int64_t e = first_element(); e < n * n; e += element_stride()) {
        const int64_t i = e / n, j = e % n;
        vectors[e] = static_cast<float>(m[(n - 1 - j) * n + i]);
    }
}

constexpr cusolverEigMode_t kVectors = CUSOLVER_EIG_MODE_VECTOR;
constexpr cublasFillMode_t kUpper = CUBLAS_FILL_MODE_UPPER;  // column-major upper = row-major lower

cusolverStatus_t syevd_workspace(cusolverDnHandle_t h, int n, const float* a, const float* w, int* lwork) {
    return cusolverDnSsyevd_bufferSize(h, kVectors, kUpper, n, a, n, w, lwork);
}
cusolverStatus_t syevd_workspace(cusolverDnHandle_t h, int n, const double* a, const double* w, int* lwork) {
    return cusolverDnDsyevd_bufferSize(h, kVectors, kUpper, n, a, n, w, lwork);
}
cusolverStatus_t syevd(cusolverDnHandle_t h, int n, float* a, float* w, float* work, int lwork, int* info) {
    return cusolverDnSsyevd(h, kVectors, kUpper, n, a, n, w, work, lwork, info);
}
cusolverStatus_t syevd(cusolverDnHandle_t h, int n, double* a, double* w, double* work, int lwork, int* info) {
    return cusolverDnDsyevd(h, kVectors, kUpper, n, a, n, w, work, lwork, info);
}

// The eigenvectors of `a` (n x n row-major, lower triangle read) in precision T into `vectors`, descending.
// Returns syevd's info; `vectors` is written only when it is 0.
template <class T>
int eigenvectors_in(CudaContext& ctx, LinalgHandles& h, const float* a, int n, float* vectors) {
    const int64_t nn = static_cast<int64_t>(n) * n;
    DeviceBuffer<T> m = device_buffer<T>(nn);  // column-major working copy; the eigenvectors on return
    DeviceBuffer<T> w = device_buffer<T>(n);   // eigenvalues, ascending (unused)
    DeviceBuffer<int> info = device_buffer<int>(1);
    widen<T><<<elementwise_blocks(nn), kElementwiseThreads, 0, ctx.stream>>>(m.ptr, a, nn);
    CUDA_CHECK_LAUNCH();
    int lwork = 0;
    CUSOLVER_CHECK(syevd_workspace(h.solver, n, m.ptr, w.ptr, &lwork));
    DeviceBuffer<T> work = device_buffer<T>(std::max(1, lwork));
    CUSOLVER_CHECK(syevd(h.solver, n, m.ptr, w.ptr, work.ptr, lwork, info.ptr));
    int host_info = 0;
    read_infos(ctx, info.ptr, &host_info, 1);
    if (host_info != 0) return host_info;
    descending_columns<T><<<elementwise_blocks(nn), kElementwiseThreads, 0, ctx.stream>>>(vectors, m.ptr, n);
    CUDA_CHECK_LAUNCH();
    return 0;
}

}  // namespace

// c[m,n] = alpha op(a) op(b) + beta c, through the column-major view (see the top of the file).
void CudaOps::matmul(Tensor& c, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, float alpha,
                     float beta) {
    const OpTimer timer(*this, "matmul");
    const MatmulDims d = check_matmul(c, a, b, trans_a, trans_b, Device::cuda);
    if (d.m == 0 || d.n == 0) return;
    if (d.k == 0) {  // an empty sum; the libraries reject a leading dimension of 0
        if (beta == 0.0f)
            c.zero();
        else
            scale_inplace(c, beta);
        return;
    }
    const int m = library_size(d.m, "matmul"), n = library_size(d.n, "matmul"), k = library_size(d.k, "matmul");
    const int lda = trans_a ? m : k, ldb = trans_b ? k : n;
    CudaContext& ctx = context();
    CUBLAS_CHECK(cublasGemmEx(handles(ctx).blas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                              trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b.data(), CUDA_R_32F, ldb,
                              a.data(), CUDA_R_32F, lda, &beta, c.data(), CUDA_R_32F, n, CUBLAS_COMPUTE_32F_PEDANTIC,
                              CUBLAS_GEMM_DEFAULT));
}

// syevd in single precision; if it does not converge, in double, as the CPU falls back to dsyevd.
void CudaOps::symmetric_eigenvectors_descending(Tensor& vectors, const Tensor& a) {
    const OpTimer timer(*this, "symmetric_eigenvectors_descending");
    const char* op = "symmetric_eigenvectors_descending";
    const int n = library_size(check_factorization(op, "vectors", vectors, a, Device::cuda), op);
    if (n == 0) return;
    CudaContext& ctx = context();
    LinalgHandles& h = handles(ctx);
    const auto* ap = static_cast<const float*>(a.data());
    auto* vp = static_cast<float*>(vectors.data());
    const int single_info = eigenvectors_in<float>(ctx, h, ap, n, vp);
    if (single_info == 0) return;
    const int double_info = eigenvectors_in<double>(ctx, h, ap, n, vp);
    if (double_info != 0)
        throw RuntimeError("eigendecomposition of a " + std::to_string(n) + "x" + std::to_string(n) +
                           " matrix failed: cusolverDnSsyevd info " + std::to_string(single_info) +
                           ", cusolverDnDsyevd info " + std::to_string(double_info));
}

// Householder QR of a column-major copy of a; Q written back row-major.
void CudaOps::qr_orthonormal(Tensor& q, const Tensor& a) {
    const OpTimer timer(*this, "qr_orthonormal");
    const char* op = "qr_orthonormal";
    const int n = library_size(check_factorization(op, "q", q, a, Device::cuda), op);
    if (n == 0) return;
    CudaContext& ctx = context();
    LinalgHandles& h = handles(ctx);
    const int64_t nn = static_cast<int64_t>(n) * n;
    DeviceBuffer<float> m = device_buffer<float>(nn);
    DeviceBuffer<float> tau = device_buffer<float>(n);
    DeviceBuffer<int> info = device_buffer<int>(2);  // geqrf's, orgqr's
    transpose_square<<<elementwise_blocks(nn), kElementwiseThreads, 0, ctx.stream>>>(
        m.ptr, static_cast<const float*>(a.data()), n);
    CUDA_CHECK_LAUNCH();
    int lwork_geqrf = 0, lwork_orgqr = 0;
    CUSOLVER_CHECK(cusolverDnSgeqrf_bufferSize(h.solver, n, n, m.ptr, n, &lwork_geqrf));
    CUSOLVER_CHECK(cusolverDnSorgqr_bufferSize(h.solver, n, n, n, m.ptr, n, tau.ptr, &lwork_orgqr));
    const int lwork = std::max({1, lwork_geqrf, lwork_orgqr});
    DeviceBuffer<float> work = device_buffer<float>(lwork);
    CUSOLVER_CHECK(cusolverDnSgeqrf(h.solver, n, n, m.ptr, n, tau.ptr, work.ptr, lwork, info.ptr));
    CUSOLVER_CHECK(cusolverDnSorgqr(h.solver, n, n, n, m.ptr, n, tau.ptr, work.ptr, lwork, info.ptr + 1));
    int host_info[2] = {0, 0};
    read_infos(ctx, info.ptr, host_info, 2);
    if (host_info[0] != 0 || host_info[1] != 0)
        throw RuntimeError("QR of a " + std::to_string(n) + "x" + std::to_string(n) + " matrix failed: " +
                           "cusolverDnSgeqrf info " + std::to_string(host_info[0]) + ", cusolverDnSorgqr info " +
                           std::to_string(host_info[1]));
    transpose_square<<<elementwise_blocks(nn), kElementwiseThreads, 0, ctx.stream>>>(
        static_cast<float*>(q.data()), m.ptr, n);
    CUDA_CHECK_LAUNCH();
}

}  // namespace nb::cuda

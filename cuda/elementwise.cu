// Element-wise ops and reductions on the CUDA backend, over the flat element order of a tensor.
//
// cast:          dst[i] = src[i] converted (f32 -> bf16 rounds to nearest even; bf16 -> f32 is exact;
//                same dtype is a device-to-device copy).
// add_inplace:   a[i] += b[i], same dtype; bf16: widened to f32, added, rounded once; f32: f32 add.
// scale_inplace: a[i] *= s; bf16: widened, multiplied in f32, rounded once.
// sum / sum_squares (f32 or bf16 input): deterministic two-pass reduction. A FIXED grid of kReduceBlocks x
//   kReduceThreads threads (independent of the GPU and of n); thread t of block b accumulates, in double,
//   elements i = b*T + t, then i += B*T, ... in increasing i; each block combines its threads' sums in a fixed
//   shared-memory tree; the B block partials are copied to the host and added there in block order, in double.
//   The order differs from the CPU's sequential one, so results agree to double rounding (~1e-16 relative per
//   element), not bit for bit, but every run gives the same bits. Synchronises the stream.
//
// Explicitly rounded intrinsics (__fadd_rn, __fmul_rn, __dadd_rn, __dmul_rn) keep nvcc from contracting a
// multiply and an add into an FMA, so f32 results match the CPU's (built with -ffp-contract=off) exactly.
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "cuda/bf16.cuh"
#include "cuda/context.h"
#include "cuda/cuda_check.h"
#include "cuda/cuda_ops.h"
#include "cuda/describe.h"

namespace nb::cuda {

namespace {

constexpr unsigned kThreads = 256;
constexpr unsigned kMaxBlocks = 1u << 20;  // element-wise grids: grid-stride beyond this
constexpr unsigned kReduceBlocks = 1024;   // fixed: the reduction order must not depend on the GPU
constexpr unsigned kReduceThreads = 256;   // power of two (tree reduction)

unsigned grid_for(int64_t n) {
    const unsigned b = blocks_for(n, kThreads);
    return b < kMaxBlocks ? b : kMaxBlocks;
}

void require_cuda_float(const char* op, const char* name, const Tensor& t) {
    if (!t.defined()) throw std::invalid_argument(std::string(op) + ": " + name + " is undefined");
    if (t.device() != Device::cuda || (t.dtype() != DType::f32 && t.dtype() != DType::bf16))
        throw std::invalid_argument(std::string(op) + ": " + name + " must be an f32 or bf16 CUDA tensor, got " +
                                    describe(t));
}

__device__ __forceinline__ int64_t global_index() {
    return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_stride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

__global__ void cast_f32_to_bf16(bf16* __restrict__ dst, const float* __restrict__ src, int64_t n) {
    for (int64_t i = global_index(); i < n; i += grid_stride()) dst[i] = to_bf16(src[i]);
}

__global__ void cast_bf16_to_f32(float* __restrict__ dst, const bf16* __restrict__ src, int64_t n) {
    for (int64_t i = global_index(); i < n; i += grid_stride()) dst[i] = to_f32(src[i]);
}

__global__ void add_f32(float* a, const float* b, int64_t n) {
    for (int64_t i = global_index(); i < n; i += grid_stride()) a[i] = __fadd_rn(a[i], b[i]);
}

__global__ void add_bf16(bf16* a, const bf16* b, int64_t n) {
    for (int64_t i = global_index(); i < n; i += grid_stride()) a[i] = to_bf16(__fadd_rn(to_f32(a[i]), to_f32(b[i])));
}

__global__ void scale_f32(float* a, float s, int64_t n) {
    for (int64_t i = global_index(); i < n; i += grid_stride()) a[i] = __fmul_rn(a[i], s);
}

__global__ void scale_bf16(bf16* a, float s, int64_t n) {
    for (int64_t i = global_index(); i < n; i += grid_stride()) a[i] = to_bf16(__fmul_rn(to_f32(a[i]), s));
}

// partials[blockIdx.x] = sum over this block's slice of x[i] (SQUARES: x[i]^2, exact in double), in double.
// Launched with exactly kReduceBlocks x kReduceThreads.
template <class T, bool SQUARES>
__global__ void __launch_bounds__(kReduceThreads) reduce_partials(const T* __restrict__ x, int64_t n,
                                                                  double* __restrict__ partials) {
    __shared__ double shared[kReduceThreads];
    double acc = 0.0;
    const int64_t stride = static_cast<int64_t>(kReduceBlocks) * kReduceThreads;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * kReduceThreads + threadIdx.x; i < n; i += stride) {
        const double v = static_cast<double>(to_f32(x[i]));
        acc = __dadd_rn(acc, SQUARES ? __dmul_rn(v, v) : v);
    }
    shared[threadIdx.x] = acc;
    __syncthreads();
    for (unsigned half = kReduceThreads / 2; half > 0; half >>= 1) {
        if (threadIdx.x < half) shared[threadIdx.x] = __dadd_rn(shared[threadIdx.x], shared[threadIdx.x + half]);
        __syncthreads();
    }
    if (threadIdx.x == 0) partials[blockIdx.x] = shared[0];
}

template <bool SQUARES>
double reduce(CudaContext& ctx, const Tensor& x) {
    const int64_t n = x.numel();
    if (n == 0) return 0.0;
    auto* partials = static_cast<double*>(ctx.scratch(kReduceBlocks * sizeof(double)));
    if (x.dtype() == DType::f32)
        reduce_partials<float, SQUARES>
            <<<kReduceBlocks, kReduceThreads, 0, ctx.stream>>>(static_cast<const float*>(x.data()), n, partials);
    else
        reduce_partials<bf16, SQUARES>
            <<<kReduceBlocks, kReduceThreads, 0, ctx.stream>>>(static_cast<const bf16*>(x.data()), n, partials);
    CUDA_CHECK_LAUNCH();
    std::vector<double> host(kReduceBlocks);
    CUDA_CHECK(cudaMemcpyAsync(host.data(), partials, kReduceBlocks * sizeof(double), cudaMemcpyDeviceToHost,
                               ctx.stream));
    CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
    double total = 0.0;
    for (double p : host) total += p;
    return total;
}

}  // namespace

void CudaOps::cast(Tensor& dst, const Tensor& src) {
    const OpTimer timer(*this, "cast");
    require_cuda_float("cast", "dst", dst);
    require_cuda_float("cast", "src", src);
    if (dst.numel() != src.numel())
        throw std::invalid_argument("cast: dst " + describe(dst) + " and src " + describe(src) +
                                    " differ in element count");
    const int64_t n = src.numel();
    if (n == 0) return;
    CudaContext& ctx = context();
    if (dst.dtype() == src.dtype()) {
        CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), src.bytes(), cudaMemcpyDeviceToDevice, ctx.stream));
    } else if (dst.dtype() == DType::bf16) {
        cast_f32_to_bf16<<<grid_for(n), kThreads, 0, ctx.stream>>>(static_cast<bf16*>(dst.data()),
                                                                    static_cast<const float*>(src.data()), n);
        CUDA_CHECK_LAUNCH();
    } else {
        cast_bf16_to_f32<<<grid_for(n), kThreads, 0, ctx.stream>>>(static_cast<float*>(dst.data()),
                                                                    static_cast<const bf16*>(src.data()), n);
        CUDA_CHECK_LAUNCH();
    }
}

void CudaOps::add_inplace(Tensor& a, const Tensor& b) {
    const OpTimer timer(*this, "add_inplace");
    require_cuda_float("add_inplace", "a", a);
    require_cuda_float("add_inplace", "b", b);
    if (a.numel() != b.numel() || a.dtype() != b.dtype())
        throw std::invalid_argument("add_inplace: a " + describe(a) + " and b " + describe(b) +
                                    " must have one dtype and element count");
    const int64_t n = a.numel();
    if (n == 0) return;
    CudaContext& ctx = context();
    if (a.dtype() == DType::f32)
        add_f32<<<grid_for(n), kThreads, 0, ctx.stream>>>(static_cast<float*>(a.data()),
                                                           static_cast<const float*>(b.data()), n);
    else
        add_bf16<<<grid_for(n), kThreads, 0, ctx.stream>>>(static_cast<bf16*>(a.data()),
                                                            static_cast<const bf16*>(b.data()), n);
    CUDA_CHECK_LAUNCH();
}

void CudaOps::scale_inplace(Tensor& a, float s) {
    const OpTimer timer(*this, "scale_inplace");
    require_cuda_float("scale_inplace", "a", a);
    const int64_t n = a.numel();
    if (n == 0) return;
    CudaContext& ctx = context();
    if (a.dtype() == DType::f32)
        scale_f32<<<grid_for(n), kThreads, 0, ctx.stream>>>(static_cast<float*>(a.data()), s, n);
    else
        scale_bf16<<<grid_for(n), kThreads, 0, ctx.stream>>>(static_cast<bf16*>(a.data()), s, n);
    CUDA_CHECK_LAUNCH();
}

double CudaOps::sum(const Tensor& x) {
    const OpTimer timer(*this, "sum");
    require_cuda_float("sum", "x", x);
    return reduce<false>(context(), x);
}

double CudaOps::sum_squares(const Tensor& x) {
    const OpTimer timer(*this, "sum_squares");
    require_cuda_float("sum_squares", "x", x);
    return reduce<true>(context(), x);
}

}  // namespace nb::cuda

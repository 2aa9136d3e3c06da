// Muon's Newton-Schulz iteration on the device for a batch of same-shaped f32 matrices (Ops::newton_schulz), as
// KellerJordan/Muon's zeropower_via_newtonschulz5 runs it: in bf16, the products accumulated in f32.
//
//   per matrix:   X = bf16(G / (||G||_F + 1e-7))      transposed when rows > cols, so X is [r, c] with r <= c
//   steps times:  A = X X^T ;  B = b A + c A A ;  X = a X + B X       (a, b, c) = (3.4445, -4.7750, 2.0315)
//                 each a GEMM with bf16 inputs, f32 accumulation and a bf16 result
//   per matrix:   out = f32(X)                         transposed back
//
// Not the CPU's bits (src/cpu/newton_schulz.cpp runs in f32): bf16 keeps 8 significant bits, and each iteration
// rounds X, A and B; emulating that on the CPU gives results 1-2% (relative Frobenius) from the f32 ones, with
// every singular value still in the iteration's band of about [0.7, 1.2] (tests/cuda/test_cuda_optimizers.cpp).
//
// ||G||_F: per matrix, kNormBlocks blocks add x^2 in double over fixed strided slices, each block folds its
// threads' sums in a fixed order, and one thread per matrix adds the block sums in order: the same bits every
// run. The norm is then rounded to float and 1e-7 added in float, as on the CPU.
//
// The GEMMs are cuBLASLt strided-batched matmuls, one call per product for the whole batch (Muon::step batches
// the hidden matrices of one shape, e.g. SmolLM-360M's 64 [960, 960] attention projections). cuBLASLt rather
// than cublasGemmStridedBatchedEx, for two reasons:
// - D may be another buffer than C, so B = b A + c A A and a X + B X are one call each, with no copy of A or X
//   into the output first.
// - The algorithm is ours to fix. It is chosen by the heuristic for ONE matrix of the shape and then run on the
//   whole batch (cublasLtMatmulAlgoCheck confirms it takes the batch), so a matrix gets the same bits whether it
//   is orthogonalised alone or in a batch of any size; a heuristic asked about the batch could pick another
//   kernel (split-K for a lone small matrix, say) and with it another summation order. Split-K partial sums are
//   kept in f32 (as in cuda/linear.cu). Should the check refuse the batch, the batched heuristic decides instead
//   (still deterministic, but then a batch's bits may differ from one matrix's).
// Plans are cached per (r, c, batch, alignment). The handle and the 32 MiB workspace are the context's, shared
// with linear.cu: every op runs in order on the one stream, so two GEMMs never use the workspace at once.
//
// cuBLASLt is column-major, and a row-major [R, C] matrix is the column-major [C, R] one (see cuda/linear.cu).
// In its terms, with X^T the column-major view of the row-major X (ld c):
//   A = X X^T        m = r, n = r, k = c:  op(A) = T on X^T [c, r];  op(B) = N on X^T [c, r];  D [r, r]
//   B = c A A + b A  m = n = k = r:  N, N on A's buffer ([r, r]: A^T A^T = (A A)^T);  C = A, beta = b;  alpha = c
//   X' = B X + a X   m = c, n = r, k = r:  N on X^T [c, r], N on B's buffer ([r, r]: X^T B^T = (B X)^T);
//                    C = X^T, beta = a;  D = X'^T
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "cuda/bf16.cuh"
#include "cuda/context.h"
#include "cuda/cuda_check.h"
#include "cuda/cuda_ops.h"
#include "src/ops/optimizer_checks.h"

namespace nb::cuda {

namespace {

constexpr float kA = 3.4445f, kB = -4.7750f, kC = 2.0315f;
constexpr float kNormEps = 1e-7f;
constexpr unsigned kNormBlocks = 32;   // per matrix; fixed, so the summation order does not depend on the GPU
constexpr unsigned kNormThreads = 256;  // a multiple of 32 (warp folds)
constexpr int kTile = 32;               // transpose tiles: kTile x kTile elements, kTile x kTileRows threads
constexpr int kTileRows = 8;
constexpr int64_t kMaxBatch = 65535;  // gridDim.y / gridDim.z

// ---- norms ----

// The sum of v over the block, in a fixed order: each warp folds by shuffles (offsets 16, 8, 4, 2, 1), then the
// first warp folds the warp sums likewise. Thread 0 returns the block's sum.
__device__ double block_sum(double v) {
    constexpr unsigned kWarps = kNormThreads / 32;
    __shared__ double warp_sums[kWarps];
    for (int offset = 16; offset > 0; offset >>= 1) v = __dadd_rn(v, __shfl_down_sync(0xffffffffu, v, offset));
    if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x / 32] = v;
    __syncthreads();
    if (threadIdx.x < 32) {
        v = threadIdx.x < kWarps ? warp_sums[threadIdx.x] : 0.0;
        for (int offset = 16; offset > 0; offset >>= 1) v = __dadd_rn(v, __shfl_down_sync(0xffffffffu, v, offset));
    }
    return v;
}

// partials[b * kNormBlocks + blockIdx.x] = sum of in[b][i]^2 over this block's slice (grid kNormBlocks x batch).
__global__ void __launch_bounds__(kNormThreads)
    norm_partials(const float* const* __restrict__ in, int64_t n, double* __restrict__ partials) {
    const float* x = in[blockIdx.y];
    double acc = 0.0;
    const int64_t stride = static_cast<int64_t>(kNormBlocks) * kNormThreads;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * kNormThreads + threadIdx.x; i < n; i += stride) {
        const double v = static_cast<double>(x[i]);
        acc = __dadd_rn(acc, __dmul_rn(v, v));
    }
    acc = block_sum(acc);
    if (threadIdx.x == 0) partials[static_cast<int64_t>(blockIdx.y) * kNormBlocks + blockIdx.x] = acc;
}

// norms[b] = f32(sqrt(sum of matrix b's partials, in order)) + 1e-7, the CPU's expression.
__global__ void norms_from_partials(const double* __restrict__ partials, int64_t batch, float* __restrict__ norms) {
    const int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (b >= batch) return;
    double sum = 0.0;
    for (unsigned j = 0; j < kNormBlocks; ++j) sum = __dadd_rn(sum, partials[b * kNormBlocks + j]);
    norms[b] = __fadd_rn(__double2float_rn(__dsqrt_rn(sum)), kNormEps);
}

// ---- moving the batch between the f32 tensors and the contiguous bf16 working buffer ----

// Element i of input matrix b, normalised: G_b[i] / norm_b (a true division, as the CPU's).
struct NormalisedInput {
    const float* const* in;
    const float* norms;
    __device__ float operator()(int64_t b, int64_t i) const { return __fdiv_rn(in[b][i], norms[b]); }
};
struct OutputStore {
    float* const* out;
    __device__ void operator()(int64_t b, int64_t i, float v) const { out[b][i] = v; }
};
// Matrix b of a contiguous bf16 batch starts at base + b * stride.
struct Bf16Load {
    const bf16* base;
    int64_t stride;
    __device__ float operator()(int64_t b, int64_t i) const { return to_f32(base[b * stride + i]); }
};
struct Bf16Store {
    bf16* base;
    int64_t stride;
    __device__ void operator()(int64_t b, int64_t i, float v) const { base[b * stride + i] = to_bf16(v); }
};

// store(b, i, load(b, i)) for the n elements of each matrix (grid x: elements, y: matrix).
template <class Load, class Store>
__global__ void copy_batch(Load load, Store store, int64_t n) {
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
        store(blockIdx.y, i, load(blockIdx.y, i));
}

// Matrix b read as [rows, cols] is stored transposed, [cols, rows]: through a shared-memory tile, so that reads
// and writes both run along rows (coalesced). Grid (cols / kTile, rows / kTile, batch), kTile x kTileRows threads.
template <class Load, class Store>
__global__ void transpose_batch(Load load, Store store, int64_t rows, int64_t cols) {
    __shared__ float tile[kTile][kTile + 1];  // +1: no bank conflicts on the transposed reads
    const int64_t b = blockIdx.z;
    const int64_t row0 = static_cast<int64_t>(blockIdx.y) * kTile, col0 = static_cast<int64_t>(blockIdx.x) * kTile;
    for (int dy = threadIdx.y; dy < kTile; dy += kTileRows) {
        const int64_t r = row0 + dy, c = col0 + threadIdx.x;
        if (r < rows && c < cols) tile[dy][threadIdx.x] = load(b, r * cols + c);
    }
    __syncthreads();
    for (int dy = threadIdx.y; dy < kTile; dy += kTileRows) {
        const int64_t c = col0 + dy, r = row0 + threadIdx.x;  // output row c, column r
        if (r < rows && c < cols) store(b, c * rows + r, tile[threadIdx.x][dy]);
    }
}

// The batch's [rows, cols] matrices moved from load to store, transposed or not.
template <class Load, class Store>
void move_batch(cudaStream_t stream, Load load, Store store, int64_t batch, int64_t rows, int64_t cols,
                bool transpose) {
    if (transpose) {
        const dim3 grid(static_cast<unsigned>((cols + kTile - 1) / kTile),
                        static_cast<unsigned>((rows + kTile - 1) / kTile), static_cast<unsigned>(batch));
        transpose_batch<<<grid, dim3(kTile, kTileRows), 0, stream>>>(load, store, rows, cols);
    } else {
        const unsigned blocks = std::min(blocks_for(rows * cols, 256), 4096u);
        copy_batch<<<dim3(blocks, static_cast<unsigned>(batch)), 256, 0, stream>>>(load, store, rows * cols);
    }
    CUDA_CHECK_LAUNCH();
}

// ---- the batched GEMMs ----

// Largest power of two (<= 256) dividing `value`: the alignment in bytes an address or byte offset guarantees.
uint32_t alignment_of(uint64_t value) {
    uint32_t align = 256;
    while (align > 1 && value % align != 0) align >>= 1;
    return align;
}

// One product D = alpha op(A) op(B) + beta C over the batch, bf16 A, B, C and D (C and D share a layout).
struct BatchedGemm {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
};

void destroy_gemm(BatchedGemm& g) noexcept {
    if (g.a) cublasLtMatrixLayoutDestroy(g.a);
    if (g.b) cublasLtMatrixLayoutDestroy(g.b);
    if (g.c) cublasLtMatrixLayoutDestroy(g.c);
    if (g.desc) cublasLtMatmulDescDestroy(g.desc);
    g = BatchedGemm{};
}

// Column-major operands as stored: [rows, cols] with leading dimension ld, matrix b at b * stride elements.
struct Operand {
    int64_t rows, cols, ld, stride;
};

void make_layout(const Operand& o, int32_t batch, cublasLtMatrixLayout_t* out) {
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(out, CUDA_R_16BF, static_cast<uint64_t>(o.rows),
                                            static_cast<uint64_t>(o.cols), o.ld));
    CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(*out, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch));
    CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(*out, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &o.stride,
                                                  sizeof o.stride));
}

// The heuristic's first algorithm for (desc, layouts) under `pref`, split-K partial sums in f32 if it has one
// such; false when it has none at all.
bool first_algorithm(CudaContext& ctx, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                     cublasLtMatrixLayout_t c, cublasLtMatmulPreference_t pref, cublasLtMatmulAlgo_t* algo) {
    for (uint32_t mask : {uint32_t{CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE}, uint32_t{CUBLASLT_REDUCTION_SCHEME_MASK}}) {
        CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &mask,
                                                          sizeof mask));
        cublasLtMatmulHeuristicResult_t result{};
        int found = 0;
        const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(ctx.lt, desc, a, b, c, c, pref, 1, &result, &found);
        if (st == CUBLAS_STATUS_SUCCESS && found >= 1 && result.state == CUBLAS_STATUS_SUCCESS) {
            *algo = result.algo;
            return true;
        }
    }
    return false;
}

// Builds the plan of one product over `batch` matrices: the algorithm is the one-matrix heuristic's when the
// batch accepts it (see the top of the file), else the batched heuristic's.
BatchedGemm make_gemm(CudaContext& ctx, cublasOperation_t ta, cublasOperation_t tb, const Operand& a,
                      const Operand& b, const Operand& c, int32_t batch, uint32_t align) {
    BatchedGemm g;
    cublasLtMatrixLayout_t a1 = nullptr, b1 = nullptr, c1 = nullptr;  // the same operands, a batch of one
    cublasLtMatmulPreference_t pref = nullptr;
    auto release = [&] {
        if (a1) cublasLtMatrixLayoutDestroy(a1);
        if (b1) cublasLtMatrixLayoutDestroy(b1);
        if (c1) cublasLtMatrixLayoutDestroy(c1);
        if (pref) cublasLtMatmulPreferenceDestroy(pref);
    };
    try {
        CUBLAS_CHECK(cublasLtMatmulDescCreate(&g.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
        make_layout(a, batch, &g.a);
        make_layout(b, batch, &g.b);
        make_layout(c, batch, &g.c);
        make_layout(a, 1, &a1);
        make_layout(b, 1, &b1);
        make_layout(c, 1, &c1);
        CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
        const uint64_t ws = ctx.workspace_bytes;
        CUBLAS_CHECK(
            cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
        for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                          CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
            CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &align, sizeof align));

        bool chosen = false;
        if (first_algorithm(ctx, g.desc, a1, b1, c1, pref, &g.algo)) {
            cublasLtMatmulHeuristicResult_t check{};
            chosen = cublasLtMatmulAlgoCheck(ctx.lt, g.desc, g.a, g.b, g.c, g.c, &g.algo, &check) ==
                         CUBLAS_STATUS_SUCCESS &&
                     check.state == CUBLAS_STATUS_SUCCESS && check.workspaceSize <= ctx.workspace_bytes;
        }
        if (!chosen && !first_algorithm(ctx, g.desc, g.a, g.b, g.c, pref, &g.algo))
            throw RuntimeError("newton_schulz: cuBLASLt has no bf16 algorithm for a batch of " + std::to_string(batch) +
                               " products m=" + std::to_string(c.rows) + " n=" + std::to_string(c.cols) +
                               " (alignment " + std::to_string(align) + " bytes)");
    } catch (...) {
        release();
        destroy_gemm(g);
        throw;
    }
    release();
    return g;
}

// The three products of one iteration, for a batch of [r, c] matrices (r <= c) with the given alignment.
struct IterationPlan {
    BatchedGemm gram, poly, update;
};

IterationPlan make_iteration_plan(CudaContext& ctx, int64_t r, int64_t c, int32_t batch, uint32_t align) {
    const Operand x{c, r, c, r * c};   // X^T: column-major [c, r]
    const Operand sq{r, r, r, r * r};  // A or B: [r, r]
    IterationPlan plan;
    try {
        plan.gram = make_gemm(ctx, CUBLAS_OP_T, CUBLAS_OP_N, x, x, sq, batch, align);
        plan.poly = make_gemm(ctx, CUBLAS_OP_N, CUBLAS_OP_N, sq, sq, sq, batch, align);
        plan.update = make_gemm(ctx, CUBLAS_OP_N, CUBLAS_OP_N, x, sq, x, batch, align);
    } catch (...) {
        destroy_gemm(plan.gram);
        destroy_gemm(plan.poly);
        destroy_gemm(plan.update);
        throw;
    }
    return plan;
}

// D = alpha op(A) op(B) + beta C (the layouts are the plan's).
void run_gemm(CudaContext& ctx, const BatchedGemm& g, float alpha, const void* a, const void* b, float beta,
              const void* c, void* d) {
    CUBLAS_CHECK(cublasLtMatmul(ctx.lt, g.desc, &alpha, a, g.a, b, g.b, &beta, c, g.c, d, g.c, &g.algo, ctx.workspace,
                                ctx.workspace_bytes, ctx.stream));
}

}  // namespace

struct NewtonSchulzPlans {
    std::mutex mutex;
    std::map<std::tuple<int64_t, int64_t, int32_t, uint32_t>, IterationPlan> plans;  // (r, c, batch, alignment)
};

void destroy_newton_schulz_plans(NewtonSchulzPlans* cache) noexcept {
    if (!cache) return;
    for (auto& [key, plan] : cache->plans) {
        destroy_gemm(plan.gram);
        destroy_gemm(plan.poly);
        destroy_gemm(plan.update);
    }
    delete cache;
}

namespace {

const IterationPlan& iteration_plan(CudaContext& ctx, int64_t r, int64_t c, int32_t batch, uint32_t align) {
    if (!ctx.newton_schulz_plans) ctx.newton_schulz_plans = new NewtonSchulzPlans();
    NewtonSchulzPlans& cache = *ctx.newton_schulz_plans;
    std::lock_guard<std::mutex> lock(cache.mutex);
    const auto key = std::make_tuple(r, c, batch, align);
    auto it = cache.plans.find(key);
    if (it != cache.plans.end()) return it->second;
    return cache.plans.emplace(key, make_iteration_plan(ctx, r, c, batch, align)).first->second;
}

size_t round_up_16(size_t bytes) { return (bytes + 15) & ~size_t{15}; }

}  // namespace

void CudaOps::newton_schulz(const std::vector<Tensor*>& outs, const std::vector<const Tensor*>& ins, int steps) {
    const OpTimer timer(*this, "newton_schulz");
    const MatrixBatch shape = check_matrix_batch("newton_schulz", Device::cuda, outs, ins);
    if (steps < 0) throw std::invalid_argument("newton_schulz: steps " + std::to_string(steps) + " must be >= 0");
    const auto batch = static_cast<int64_t>(ins.size());
    if (batch > kMaxBatch)
        throw std::invalid_argument("newton_schulz: a batch of " + std::to_string(batch) + " matrices (at most " +
                                    std::to_string(kMaxBatch) + ")");
    const int64_t rows = shape.rows, cols = shape.cols, n = rows * cols;
    if (n == 0) return;
    if ((std::max(rows, cols) + kTile - 1) / kTile > 65535)
        throw std::invalid_argument("newton_schulz: a [" + std::to_string(rows) + ", " + std::to_string(cols) +
                                    "] matrix has a side too long for the transpose grid");
    const bool transpose = rows > cols;
    const int64_t r = transpose ? cols : rows, c = transpose ? rows : cols;
    CudaContext& ctx = context();

    // Scratch, valid for this op: the norms' block partials, the norms, and the tables of input and output
    // pointers (uploaded from the host; the copy is staged before cudaMemcpyAsync returns).
    const size_t partial_bytes = round_up_16(static_cast<size_t>(batch) * kNormBlocks * sizeof(double));
    const size_t norm_bytes = round_up_16(static_cast<size_t>(batch) * sizeof(float));
    std::vector<const void*> pointers;
    for (const Tensor* t : ins) pointers.push_back(t->data());
    for (Tensor* t : outs) pointers.push_back(t->data());
    const size_t pointer_bytes = pointers.size() * sizeof(void*);
    auto* scratch = static_cast<unsigned char*>(ctx.scratch(partial_bytes + norm_bytes + pointer_bytes));
    auto* partials = reinterpret_cast<double*>(scratch);
    auto* norms = reinterpret_cast<float*>(scratch + partial_bytes);
    auto* table = scratch + partial_bytes + norm_bytes;
    CUDA_CHECK(cudaMemcpyAsync(table, pointers.data(), pointer_bytes, cudaMemcpyHostToDevice, ctx.stream));
    const auto* in_table = reinterpret_cast<const float* const*>(table);
    const auto* out_table = reinterpret_cast<float* const*>(table) + batch;

    norm_partials<<<dim3(kNormBlocks, static_cast<unsigned>(batch)), kNormThreads, 0, ctx.stream>>>(in_table, n,
                                                                                                   partials);
    CUDA_CHECK_LAUNCH();
    norms_from_partials<<<blocks_for(batch, 128), 128, 0, ctx.stream>>>(partials, batch, norms);
    CUDA_CHECK_LAUNCH();

    // The working batch: X and the next X [batch, r, c], A and B [batch, r, r], contiguous bf16.
    Tensor x = empty({batch, r, c}, DType::bf16), x_next = empty({batch, r, c}, DType::bf16);
    Tensor a = empty({batch, r, r}, DType::bf16), b = empty({batch, r, r}, DType::bf16);
    move_batch(ctx.stream, NormalisedInput{in_table, norms}, Bf16Store{static_cast<bf16*>(x.data()), r * c}, batch,
               rows, cols, transpose);

    const uint64_t x_bytes = static_cast<uint64_t>(r * c) * sizeof(bf16);
    const uint64_t sq_bytes = static_cast<uint64_t>(r * r) * sizeof(bf16);
    const uint32_t align = std::min({alignment_of(reinterpret_cast<uintptr_t>(x.data())),
                                     alignment_of(reinterpret_cast<uintptr_t>(x_next.data())),
                                     alignment_of(reinterpret_cast<uintptr_t>(a.data())),
                                     alignment_of(reinterpret_cast<uintptr_t>(b.data())), alignment_of(x_bytes),
                                     alignment_of(sq_bytes)});
    const IterationPlan& plan = iteration_plan(ctx, r, c, static_cast<int32_t>(batch), align);
    for (int s = 0; s < steps; ++s) {
        run_gemm(ctx, plan.gram, 1.0f, x.data(), x.data(), 0.0f, a.data(), a.data());         // A = X X^T
        run_gemm(ctx, plan.poly, kC, a.data(), a.data(), kB, a.data(), b.data());             // B = c A A + b A
        run_gemm(ctx, plan.update, 1.0f, x.data(), b.data(), kA, x.data(), x_next.data());    // X' = B X + a X
        std::swap(x, x_next);
    }
    // Back to f32, transposed when the input was: X is [r, c], the output [rows, cols] = [c, r] then.
    move_batch(ctx.stream, Bf16Load{static_cast<const bf16*>(x.data()), r * c}, OutputStore{out_table}, batch, r, c,
               transpose);
}

}  // namespace nb::cuda

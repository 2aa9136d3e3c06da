// The cuBLASLt GEMM that linear.cu runs, for the other ops that multiply activations by weights (the MoE grouped
// linear, cuda/moe_grouped_linear.cu): one plan cache, one heuristic rule, one bf16 accumulation rule.
#pragma once

#include <cublasLt.h>

#include <cstdint>

#include "cuda/bf16.cuh"
#include "cuda/context.h"

namespace nb::cuda {

// D = op(A) op(B) + beta C with C = D (in place), column-major as cuBLASLt sees it: op(A) [m,k], op(B) [k,n],
// C [m,n]; A stored [m,k] (ta = N) or [k,m] (ta = T) with leading dimension lda, likewise B; alpha = 1. The plan
// (descriptor, layouts, the heuristic's first algorithm) is cached per shape, leading dimensions, dtypes,
// pointer alignments and beta == 0, so one shape always runs one algorithm (bitwise deterministic).
void lt_gemm(CudaContext& ctx, cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n, int64_t k,
             const void* a, int64_t lda, const void* b, int64_t ldb, void* c, int64_t ldc, cudaDataType_t ab_type,
             cudaDataType_t cd_type, float beta);

// acc[i] = bf16(f32(acc[i]) + add[i]) for i < n, on ctx.stream: a bf16 += with one rounding (cuBLASLt's beta = 1
// on a bf16 C rounds the product first; see linear_backward).
void add_f32_into_bf16(CudaContext& ctx, bf16* acc, const float* add, int64_t n);

}  // namespace nb::cuda

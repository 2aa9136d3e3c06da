// Every matrix product of the CPU backend: OpenBLAS sgemm on tiles of the output, spread over our own threads.
//
//   C[m, n] = alpha op(A)[m, k] op(B)[k, n] + beta C,   row-major, leading dimensions lda, ldb, ldc
//   op(A) = A^T when trans_a (A stored [k, m]); op(B) = B^T when trans_b (B stored [n, k])
//
// C is cut into a grid of tiles whose shape is a function of (m, n, k) only (gemm_tiles), never of the thread
// count; each tile is one single-threaded sgemm over the whole K, and the tiles are spread over
// src/cpu/cpu_threads.h. No sum is split, and each tile is always computed by the same call, so the bits do not
// depend on the number of threads (nor on which kernel OpenBLAS picks for a given thread count: it only ever runs
// one). They may depend on the CPU: OpenBLAS picks its kernel by the CPU it runs on.
#pragma once

#include <cstdint>

namespace nb::cpu {

struct GemmTiles {
    int64_t rows = 0, cols = 0;  // a tile's rows of C and columns of C (the last row/column of tiles may be smaller)
    int64_t count(int64_t m, int64_t n) const { return ((m + rows - 1) / rows) * ((n + cols - 1) / cols); }
};

// The tiling of an m x n x k product: big problems get tiles of about kTileFlops each (enough tasks to keep the
// threads busy), no tile side below kMinTileSide unless the matrix is that small, small problems one tile.
GemmTiles gemm_tiles(int64_t m, int64_t n, int64_t k);

// C = alpha op(A) op(B) + beta C over the tiles of gemm_tiles(m, n, k), in parallel. k == 0 (an empty sum, which
// BLAS would refuse for its leading dimension of 0) scales C by beta; beta == 0 writes zeros, never 0 * C.
void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// The same product as one single-threaded sgemm on the calling thread: for ops whose own tasks are already
// independent problems (attention's heads), where one call per task is the fixed tiling.
void sgemm_one_tile(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                    int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// y[n] = W[n, k] x[k] (W row-major, leading dimension ldw), overwriting y: a one-row product (a linear layer on one
// token, as decoding runs it). sgemm would pack all of W for a single row, reading it twice; sgemv reads it once,
// which is what bounds a decode step. Tiles of a fixed number of rows of W (a function of n alone), each one
// single-threaded sgemv, spread over the threads: the bits do not depend on the thread count.
void sgemv_rows(int64_t n, int64_t k, const float* w, int64_t ldw, const float* x, float* y);

}  // namespace nb::cpu

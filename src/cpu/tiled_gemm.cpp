// Tiled sgemm (src/cpu/tiled_gemm.h).
#include "src/cpu/tiled_gemm.h"

#include <cblas.h>

#include <algorithm>

#include "src/cpu/cpu_threads.h"

namespace nb::cpu {

namespace {

// Each tile packs its own rows of A and columns of B (OpenBLAS's threads would share one packing), which costs
// in proportion to 1/rows + 1/cols of the tile's arithmetic. Measured on one thread against one call for the whole
// product (interleaved, best of 15): 256 x 256 tiles and larger reach 96-101% of its rate on the training step's
// shapes and on 2048^3, 128-row tiles 93%. About 128 MFLOP a tile (some 4 ms of one core), at most 32 tiles, cuts
// a training step's larger products into several tiles per thread.
constexpr double kTileFlops = 128e6;
constexpr int64_t kMinTileSide = 256;
constexpr int64_t kTileAlign = 16;  // tile sides are multiples of this (a whole number of micro-kernel panels)
constexpr int64_t kMaxTiles = 32;

int64_t halved(int64_t side) { return (side / 2 + kTileAlign - 1) / kTileAlign * kTileAlign; }

}  // namespace

GemmTiles gemm_tiles(int64_t m, int64_t n, int64_t k) {
    GemmTiles t{std::max<int64_t>(m, 1), std::max<int64_t>(n, 1)};
    const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
    const int64_t wanted = std::clamp<int64_t>(static_cast<int64_t>(flops / kTileFlops), 1, kMaxTiles);
    // Halve the longer side while that leaves it at least kMinTileSide, until there are enough tiles.
    while (t.count(m, n) < wanted) {
        const bool rows_can = halved(t.rows) >= kMinTileSide && halved(t.rows) < t.rows;
        const bool cols_can = halved(t.cols) >= kMinTileSide && halved(t.cols) < t.cols;
        if (rows_can && (t.rows >= t.cols || !cols_can))
            t.rows = halved(t.rows);
        else if (cols_can)
            t.cols = halved(t.cols);
        else
            break;
    }
    return t;
}

void sgemm_one_tile(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                    int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
    if (m == 0 || n == 0) return;
    if (k == 0) {  // an empty sum (BLAS rejects a leading dimension of 0 for an empty operand)
        for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
        return;
    }
    use_single_threaded_blas();
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
                static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a, static_cast<int>(lda), b,
                static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}

void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
    if (m == 0 || n == 0) return;
    const GemmTiles t = gemm_tiles(m, n, k);
    const int64_t tile_cols = (n + t.cols - 1) / t.cols;
    parallel_for(t.count(m, n), [&](int64_t tile) {
        const int64_t r0 = (tile / tile_cols) * t.rows, c0 = (tile % tile_cols) * t.cols;
        const int64_t rows = std::min(t.rows, m - r0), cols = std::min(t.cols, n - c0);
        // Row r0 of op(A) and column c0 of op(B), wherever the storage puts them.
        const float* a_tile = trans_a ? a + r0 : a + r0 * lda;
        const float* b_tile = trans_b ? b + c0 * ldb : b + c0;
        sgemm_one_tile(trans_a, trans_b, rows, cols, k, alpha, a_tile, lda, b_tile, ldb, beta, c + r0 * ldc + c0,
                       ldc);
    });
}

void sgemv_rows(int64_t n, int64_t k, const float* w, int64_t ldw, const float* x, float* y) {
    constexpr int64_t kRowsPerTile = 512;
    if (n == 0) return;
    if (k == 0) {
        std::fill(y, y + n, 0.0f);
        return;
    }
    use_single_threaded_blas();
    parallel_for((n + kRowsPerTile - 1) / kRowsPerTile, [&](int64_t tile) {
        const int64_t r0 = tile * kRowsPerTile, rows = std::min(kRowsPerTile, n - r0);
        std::fill(y + r0, y + r0 + rows, 0.0f);  // beta = 1 on zeros: never 0 * (whatever y held)
        cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<int>(rows), static_cast<int>(k), 1.0f, w + r0 * ldw,
                    static_cast<int>(ldw), x, 1, 1.0f, y + r0, 1);
    });
}

}  // namespace nb::cpu

// Hand-written FlashAttention-2-style causal grouped-query attention (the design's "hand-written fallback").
// Host side, checks and launches: cuda/attention.cu. The math is the CPU reference's (src/cpu/attention.cpp):
//
//   forward:  S = scale Q K^T (masked j > t), P = softmax_row(S), O = P V, lse_t = log sum_j exp(S_tj)
//   backward: P = exp(S - lse) (recomputed), D_t = sum_c dO_tc O_tc,
//             dV += P^T dO, dP = dO V^T, dS = P * (dP - D), dQ += scale dS K, dK += scale dS^T Q
//
// Layouts (row-major, element offsets; int64 throughout):
//   q, out, dout, dq : [B,T,H,hd]   (b,t,h,c)   -> ((b*T + t)*H  + h)*hd + c
//   k, v, dk, dv     : [B,T,KV,hd]  (b,t,kv,c)  -> ((b*T + t)*KV + kv)*hd + c
//   lse, D           : [B,H,T] f32  (b,h,t)     -> (b*H + h)*T + t
//   query head h reads kv head h / group, group = H / KV.
//
// Tiling. Every kernel works on tiles of kTile = 64 rows (query rows or key rows) with kThreads = 128 threads =
// 4 warps; warp w OWNS rows [16w, 16w+16) of the block's tile: it is the only writer of those rows of every
// per-row shared buffer (scores, probabilities, accumulators, row statistics), so between the block-wide
// tile loads the warps need only __syncwarp. The head dimension is padded with zeros to HDP (64 or 128), a
// multiple of the tensor-core step 16: zero columns add nothing to any dot product, so any hd <= 128 that is
// a multiple of 8 (the 16-byte load granularity) is exact.
//
// Products: nvcuda::wmma 16x16x16 bf16 fragments with f32 accumulators (HMMA tensor cores, sm_80+). Fragments
// are loaded from and stored to shared memory only (never relying on the opaque fragment element layout);
// per-row work (softmax, masking, rescaling) is done by plain threads on shared memory. Accumulators that
// need per-row rescaling or live across many tiles (O, dK, dV, dQ) are kept in shared memory in f32 and
// loaded into a fragment around each product.
// TODO(speed): wgmma (sm_90a), register-resident accumulators and cp.async/TMA double buffering would be
// several times faster; this version favours code that can be checked by reading.
//
// Determinism: every sum runs in a fixed order (fixed tiles, fixed loops, fixed-shape warp butterflies, no
// atomics), so the same inputs give the same bits on the same GPU model.
#pragma once

#include <cuda_bf16.h>
#include <mma.h>

#include <cstddef>
#include <cstdint>

#include "cuda/bf16.cuh"

namespace nb::cuda::attn {

constexpr int kTile = 64;       // rows per query tile (Br) and per key tile (Bc)
constexpr int kThreads = 128;   // 4 warps per block
constexpr int kWarps = kThreads / 32;
constexpr int kWarpRows = 16;   // rows of a tile owned by one warp
static_assert(kWarps * kWarpRows == kTile, "each warp owns 16 rows of the 64-row tile");
constexpr int kMaxHeadDim = 128;

// Problem size, passed by value to every kernel.
struct Dims {
    int64_t B, T, H, KV, hd;
    int64_t group;     // H / KV
    int64_t n_tiles;   // ceil(T / kTile): query tiles = key tiles
    float scale;       // 1/sqrt(hd), computed on the host as the CPU reference does
};

// ---- shared-memory layout ---------------------------------------------------------------------------------
// Row strides are padded (16 bytes for bf16 rows, 16 bytes for f32 rows) so that consecutive rows start in
// different banks; every stride keeps wmma's rules (ldm a multiple of 8 bf16 / 4 f32, every fragment pointer
// 32-byte aligned: all row strides are multiples of 16 bytes and 16 rows of any of them are a multiple of
// 32 bytes, and every buffer starts 128-byte aligned).
constexpr size_t align128(size_t x) { return (x + 127) / 128 * 128; }

template <int HDP>
struct Ld {
    static constexpr int tile = HDP + 8;      // bf16 [64 x HDP] tiles: Q, K, V, dO
    static constexpr int acc = HDP + 4;       // f32 [64 x HDP] accumulators: O, dK, dV, dQ
    static constexpr int score = kTile + 4;   // f32 [64 x 64] scores (forward)
    static constexpr int prob = kTile + 8;    // bf16 [64 x 64] P, P^T, dS, dS^T
    static constexpr int warp = 16 + 4;       // f32 [16 x 16] per-warp scratch (backward)
};

template <int HDP>
struct FwdSmem {
    using L = Ld<HDP>;
    static constexpr size_t q = 0;
    static constexpr size_t k = align128(q + sizeof(bf16) * kTile * L::tile);
    static constexpr size_t v = align128(k + sizeof(bf16) * kTile * L::tile);
    static constexpr size_t s = align128(v + sizeof(bf16) * kTile * L::tile);
    static constexpr size_t p = align128(s + sizeof(float) * kTile * L::score);
    static constexpr size_t o = align128(p + sizeof(bf16) * kTile * L::prob);
    static constexpr size_t m = align128(o + sizeof(float) * kTile * L::acc);
    static constexpr size_t l = align128(m + sizeof(float) * kTile);
    static constexpr size_t bytes = align128(l + sizeof(float) * kTile);
};

// Kernel A (dK, dV): K, V tiles fixed; Q, dO, lse, D tiles of each visited query tile; P^T and dS^T in bf16;
// dK, dV accumulators; per-warp S^T and dP^T 16x16 scratch.
template <int HDP>
struct DkvSmem {
    using L = Ld<HDP>;
    static constexpr size_t k = 0;
    static constexpr size_t v = align128(k + sizeof(bf16) * kTile * L::tile);
    static constexpr size_t q = align128(v + sizeof(bf16) * kTile * L::tile);
    static constexpr size_t dout = align128(q + sizeof(bf16) * kTile * L::tile);
    static constexpr size_t pt = align128(dout + sizeof(bf16) * kTile * L::tile);
    static constexpr size_t dst = align128(pt + sizeof(bf16) * kTile * L::prob);
    static constexpr size_t dk = align128(dst + sizeof(bf16) * kTile * L::prob);
    static constexpr size_t dv = align128(dk + sizeof(float) * kTile * L::acc);
    static constexpr size_t ws = align128(dv + sizeof(float) * kTile * L::acc);  // kWarps x [16 x 16] f32
    static constexpr size_t wdp = align128(ws + sizeof(float) * kWarps * 16 * L::warp);
    static constexpr size_t lse = align128(wdp + sizeof(float) * kWarps * 16 * L::warp);
    static constexpr size_t d = align128(lse + sizeof(float) * kTile);
    static constexpr size_t bytes = align128(d + sizeof(float) * kTile);
};

// Kernel B (dQ): Q, dO, lse, D tiles fixed; K, V tiles of each visited key tile; dS in bf16; dQ accumulator;
// per-warp S and dP 16x16 scratch.
template <int HDP>
struct DqSmem {
    using L = Ld<HDP>;
    static constexpr size_t q = 0;
    static constexpr size_t dout = align128(q + sizeof(bf16) * kTile * L::tile);
    static constexpr size_t k = align128(dout + sizeof(bf16) * kTile * L::tile);
    static constexpr size_t v = align128(k + sizeof(bf16) * kTile * L::tile);
    static constexpr size_t ds = align128(v + sizeof(bf16) * kTile * L::tile);
    static constexpr size_t dq = align128(ds + sizeof(bf16) * kTile * L::prob);
    static constexpr size_t ws = align128(dq + sizeof(float) * kTile * L::acc);
    static constexpr size_t wdp = align128(ws + sizeof(float) * kWarps * 16 * L::warp);
    static constexpr size_t lse = align128(wdp + sizeof(float) * kWarps * 16 * L::warp);
    static constexpr size_t d = align128(lse + sizeof(float) * kTile);
    static constexpr size_t bytes = align128(d + sizeof(float) * kTile);
};

// ---- helpers ------------------------------------------------------------------------------------------------
namespace wmma = nvcuda::wmma;
using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major>;
using FragBRow = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major>;  // B[k][n] at p[k*ld + n]
using FragBCol = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major>;  // B[k][n] at p[n*ld + k]
using FragAcc = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

__device__ __forceinline__ int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
    for (int off = 16; off > 0; off /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, off));
    return x;
}
// Butterfly sum: every lane ends with the same value, added in the same fixed order on every run.
__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
    for (int off = 16; off > 0; off /= 2) x += __shfl_xor_sync(0xffffffffu, x, off);
    return x;
}

// Copies a [rows x hd] bf16 slab from global memory (row r at g + r*stride) into a [kTile x HDP] shared tile
// (row stride Ld<HDP>::tile), zero-filling rows >= rows and columns >= hd. 16-byte chunks: hd % 8 == 0 and
// the host checks 16-byte alignment of every base pointer, so every chunk is aligned and never crosses hd.
// `g` is only dereferenced for r < rows. Called by all kThreads threads.
template <int HDP>
__device__ __forceinline__ void load_tile(bf16* s, const bf16* g, int64_t stride, int rows, int hd) {
    constexpr int kChunks = HDP / 8;
    for (int i = threadIdx.x; i < kTile * kChunks; i += kThreads) {
        const int r = i / kChunks, ch = i % kChunks;
        uint4 val = make_uint4(0u, 0u, 0u, 0u);
        if (r < rows && ch * 8 < hd) val = *reinterpret_cast<const uint4*>(g + r * stride + ch * 8);
        *reinterpret_cast<uint4*>(s + r * Ld<HDP>::tile + ch * 8) = val;
    }
}

// Loads lse and D of query rows q0 .. q0+63 of head row (b, h) into shared memory (0 past T: such rows are
// masked out everywhere they are used).
__device__ __forceinline__ void load_row_stats(float* s_lse, float* s_d, const float* lse, const float* D,
                                               int64_t row_base, int64_t q0, int64_t T) {
    for (int i = threadIdx.x; i < kTile; i += kThreads) {
        const int64_t t = q0 + i;
        s_lse[i] = t < T ? lse[row_base + t] : 0.0f;
        s_d[i] = t < T ? D[row_base + t] : 0.0f;
    }
}

// ---- forward ------------------------------------------------------------------------------------------------
// One block per (b, h, query tile). Grid: n_tiles * B * H blocks, the LAST query tiles (most key tiles, most
// work) first: blockIdx.x = (n_tiles-1-qt) * (B*H) + b*H + h.
//
// Per key tile kt = 0 .. (last query row of the tile) / 64 (the causal limit):
//   1. S_w = Q_w K^T            (warp w: its 16 query rows x 64 keys, wmma, into sS)
//   2. online softmax, per row: s = scale*S (masked where key > query), m_new = max(m, max_j s),
//      alpha = exp(m - m_new), p = exp(s - m_new) (bf16 into sP), l = alpha*l + sum_j p, O_row *= alpha
//   3. O_w += P_w V            (wmma, accumulator round-trips through sO)
// Finally out = O / l (bf16) and lse = m + log(l) (f32, natural log of the scaled scores).
template <int HDP>
__global__ void __launch_bounds__(kThreads) attention_forward_kernel(bf16* __restrict__ out, float* __restrict__ lse,
                                                                     const bf16* __restrict__ q,
                                                                     const bf16* __restrict__ k,
                                                                     const bf16* __restrict__ v, Dims d) {
    using L = Ld<HDP>;
    using S = FwdSmem<HDP>;
    extern __shared__ __align__(128) unsigned char smem[];
    bf16* sQ = reinterpret_cast<bf16*>(smem + S::q);
    bf16* sK = reinterpret_cast<bf16*>(smem + S::k);
    bf16* sV = reinterpret_cast<bf16*>(smem + S::v);
    float* sS = reinterpret_cast<float*>(smem + S::s);
    bf16* sP = reinterpret_cast<bf16*>(smem + S::p);
    float* sO = reinterpret_cast<float*>(smem + S::o);
    float* sM = reinterpret_cast<float*>(smem + S::m);
    float* sL = reinterpret_cast<float*>(smem + S::l);

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int w0 = warp * kWarpRows;  // first tile row owned by this warp
    const int64_t BH = d.B * d.H;
    const int64_t qt = d.n_tiles - 1 - static_cast<int64_t>(blockIdx.x) / BH;
    const int64_t bh = static_cast<int64_t>(blockIdx.x) % BH;
    const int64_t b = bh / d.H, h = bh % d.H, kvh = h / d.group;
    const int64_t q0 = qt * kTile;
    const int q_rows = static_cast<int>(min64(kTile, d.T - q0));  // >= 1
    const int hd = static_cast<int>(d.hd);
    const int64_t q_stride = d.H * d.hd, kv_stride = d.KV * d.hd;

    for (int i = threadIdx.x; i < kTile * L::acc; i += kThreads) sO[i] = 0.0f;
    for (int i = threadIdx.x; i < kTile; i += kThreads) {
        sM[i] = -INFINITY;
        sL[i] = 0.0f;
    }
    load_tile<HDP>(sQ, q + ((b * d.T + q0) * d.H + h) * d.hd, q_stride, q_rows, hd);

    const int64_t last_q = q0 + q_rows - 1;        // last real query row of this tile
    const int64_t n_kv = last_q / kTile + 1;       // key tiles 0 .. the one holding key last_q
    for (int64_t kt = 0; kt < n_kv; ++kt) {
        const int64_t k0 = kt * kTile;
        const int k_rows = static_cast<int>(min64(kTile, d.T - k0));
        __syncthreads();  // previous tile's readers of sK/sV are done (and the initialisation above is visible)
        load_tile<HDP>(sK, k + ((b * d.T + k0) * d.KV + kvh) * d.hd, kv_stride, k_rows, hd);
        load_tile<HDP>(sV, v + ((b * d.T + k0) * d.KV + kvh) * d.hd, kv_stride, k_rows, hd);
        __syncthreads();

        // 1. S_w[16 x 64] = Q_w K^T: B[c][j] = K[j][c] = sK[j*ld + c] is column-major.
        for (int j = 0; j < kTile / 16; ++j) {
            FragAcc acc;
            wmma::fill_fragment(acc, 0.0f);
#pragma unroll
            for (int kk = 0; kk < HDP / 16; ++kk) {
                FragA a;
                FragBCol bt;
                wmma::load_matrix_sync(a, sQ + w0 * L::tile + kk * 16, L::tile);
                wmma::load_matrix_sync(bt, sK + (j * 16) * L::tile + kk * 16, L::tile);
                wmma::mma_sync(acc, a, bt, acc);
            }
            wmma::store_matrix_sync(sS + w0 * L::score + j * 16, acc, L::score, wmma::mem_row_major);
        }
        __syncwarp();

        // 2. Online softmax over this warp's rows, one row at a time, lanes across the 64 keys.
        for (int r = 0; r < kWarpRows; ++r) {
            const int row = w0 + r;
            // Padding rows (q0+row >= T) behave like the last real row: finite values, never written out.
            const int64_t qi = min64(q0 + row, d.T - 1);
            constexpr int kPer = kTile / 32;  // keys per lane
            float s[kPer];
            bool visible[kPer];
            float mx = -INFINITY;
#pragma unroll
            for (int i = 0; i < kPer; ++i) {
                const int c = lane + 32 * i;
                visible[i] = k0 + c <= qi;  // causal (and so also k0 + c < T)
                s[i] = visible[i] ? sS[row * L::score + c] * d.scale : -INFINITY;
                mx = fmaxf(mx, s[i]);
            }
            mx = warp_max(mx);
            const float m_old = sM[row];
            const float m_new = fmaxf(m_old, mx);
            // m_new is finite: key 0 is visible to every row, so tile 0 sets a finite max. Guard anyway so that a
            // fully masked row could never make exp(-inf - -inf) = NaN.
            const float m_use = m_new == -INFINITY ? 0.0f : m_new;
            const float alpha = expf(m_old - m_use);  // 0 on the first tile (m_old = -inf)
            float sum = 0.0f;
#pragma unroll
            for (int i = 0; i < kPer; ++i) {
                const float p = visible[i] ? expf(s[i] - m_use) : 0.0f;
                sP[row * L::prob + lane + 32 * i] = to_bf16(p);
                sum += p;
            }
            sum = warp_sum(sum);
            for (int c = lane; c < HDP; c += 32) sO[row * L::acc + c] *= alpha;
            __syncwarp();  // every lane has read sM[row]/sL[row] before lane 0 rewrites them
            if (lane == 0) {
                sM[row] = m_new;
                sL[row] = sL[row] * alpha + sum;
            }
        }
        __syncwarp();

        // 3. O_w[16 x HDP] += P_w[16 x 64] V[64 x HDP]: B[j][c] = sV[j*ld + c] is row-major.
        for (int c16 = 0; c16 < HDP / 16; ++c16) {
            FragAcc acc;
            wmma::load_matrix_sync(acc, sO + w0 * L::acc + c16 * 16, L::acc, wmma::mem_row_major);
#pragma unroll
            for (int kk = 0; kk < kTile / 16; ++kk) {
                FragA a;
                FragBRow bv;
                wmma::load_matrix_sync(a, sP + w0 * L::prob + kk * 16, L::prob);
                wmma::load_matrix_sync(bv, sV + (kk * 16) * L::tile + c16 * 16, L::tile);
                wmma::mma_sync(acc, a, bv, acc);
            }
            wmma::store_matrix_sync(sO + w0 * L::acc + c16 * 16, acc, L::acc, wmma::mem_row_major);
        }
        __syncwarp();
    }
    __syncthreads();

    // out = O / l (l >= 1: the row maximum contributes exp(0)); lse = m + log(l).
    for (int i = threadIdx.x; i < q_rows * hd; i += kThreads) {
        const int r = i / hd, c = i % hd;
        out[((b * d.T + q0 + r) * d.H + h) * d.hd + c] = to_bf16(sO[r * L::acc + c] / sL[r]);
    }
    for (int r = threadIdx.x; r < q_rows; r += kThreads) lse[(b * d.H + h) * d.T + q0 + r] = sM[r] + logf(sL[r]);
}

// ---- backward: D = rowsum(dO * O) ---------------------------------------------------------------------------
// One warp per (b, t, h) row; lanes stride over the head dimension, then a fixed butterfly. Rows are numbered
// in q's layout, n = (b*T + t)*H + h; D is stored [B,H,T].
constexpr int kRowThreads = 256;
__global__ void __launch_bounds__(kRowThreads) attention_row_dot_kernel(float* __restrict__ D,
                                                                        const bf16* __restrict__ dout,
                                                                        const bf16* __restrict__ out, Dims d) {
    const int64_t n = static_cast<int64_t>(blockIdx.x) * (kRowThreads / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (n >= d.B * d.T * d.H) return;  // whole warps leave together (n is per warp)
    const bf16* o_row = out + n * d.hd;
    const bf16* do_row = dout + n * d.hd;
    float acc = 0.0f;
    for (int64_t c = lane; c < d.hd; c += 32) acc += to_f32(do_row[c]) * to_f32(o_row[c]);
    acc = warp_sum(acc);
    if (lane == 0) {
        const int64_t h = n % d.H, bt = n / d.H;  // bt = b*T + t
        const int64_t b = bt / d.T, t = bt % d.T;
        D[(b * d.H + h) * d.T + t] = acc;
    }
}

// ---- backward kernel A: dK, dV ------------------------------------------------------------------------------
// One block per (b, kv head, key tile). Grid: n_tiles * B * KV blocks, the FIRST key tiles (which see the most
// query tiles) first: blockIdx.x = kt * (B*KV) + b*KV + kvh.
// For each query head h of the group in order, and each query tile qt from the key tile's own tile to the
// last (queries before k0 never see these keys):
//   1. per 16x16 block (warp w's 16 keys x query block j):
//        S^T = K_w Q_j^T, dP^T = V_w dO_j^T (wmma into per-warp scratch),
//        P^T = exp(scale S^T - lse), dS^T = P^T (dP^T - D)  -> bf16 into sPt / sdSt (warp's rows)
//   2. dV_w += P^T_w dO, dK_w += dS^T_w Q   (wmma, accumulators round-trip through shared f32)
// At the end dk += scale * dK, dv += dV, read-add-write in bf16 (each element written by this block only).
//
// Kernels A and B both recompute P and dS (S, dP, exp): this doubles that part of the work but lets each
// gradient element be owned by exactly one block, so no atomics and the result is deterministic.
// __launch_bounds__(kThreads, 1): without the 1, ptxas capped the HDP=64 instance at 80 registers and spilled;
// shared memory limits this kernel to 2 (HDP=64) or 1 (HDP=128) blocks per SM anyway, so registers are free.
template <int HDP>
__global__ void __launch_bounds__(kThreads, 1) attention_backward_dkdv_kernel(
    bf16* __restrict__ dk, bf16* __restrict__ dv, const bf16* __restrict__ dout, const bf16* __restrict__ q,
    const bf16* __restrict__ k, const bf16* __restrict__ v, const float* __restrict__ lse,
    const float* __restrict__ D, Dims d) {
    using L = Ld<HDP>;
    using S = DkvSmem<HDP>;
    extern __shared__ __align__(128) unsigned char smem[];
    bf16* sK = reinterpret_cast<bf16*>(smem + S::k);
    bf16* sV = reinterpret_cast<bf16*>(smem + S::v);
    bf16* sQ = reinterpret_cast<bf16*>(smem + S::q);
    bf16* sdO = reinterpret_cast<bf16*>(smem + S::dout);
    bf16* sPt = reinterpret_cast<bf16*>(smem + S::pt);
    bf16* sdSt = reinterpret_cast<bf16*>(smem + S::dst);
    float* sdK = reinterpret_cast<float*>(smem + S::dk);
    float* sdV = reinterpret_cast<float*>(smem + S::dv);
    float* sLse = reinterpret_cast<float*>(smem + S::lse);
    float* sD = reinterpret_cast<float*>(smem + S::d);

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int w0 = warp * kWarpRows;
    float* wS = reinterpret_cast<float*>(smem + S::ws) + warp * 16 * L::warp;    // this warp's S^T block
    float* wdP = reinterpret_cast<float*>(smem + S::wdp) + warp * 16 * L::warp;  // this warp's dP^T block

    const int64_t BKV = d.B * d.KV;
    const int64_t kt = static_cast<int64_t>(blockIdx.x) / BKV;
    const int64_t bkv = static_cast<int64_t>(blockIdx.x) % BKV;
    const int64_t b = bkv / d.KV, kvh = bkv % d.KV;
    const int64_t k0 = kt * kTile;
    const int k_rows = static_cast<int>(min64(kTile, d.T - k0));  // >= 1
    const int hd = static_cast<int>(d.hd);
    const int64_t q_stride = d.H * d.hd, kv_stride = d.KV * d.hd;

    for (int i = threadIdx.x; i < kTile * L::acc; i += kThreads) {
        sdK[i] = 0.0f;
        sdV[i] = 0.0f;
    }
    load_tile<HDP>(sK, k + ((b * d.T + k0) * d.KV + kvh) * d.hd, kv_stride, k_rows, hd);
    load_tile<HDP>(sV, v + ((b * d.T + k0) * d.KV + kvh) * d.hd, kv_stride, k_rows, hd);

    for (int64_t g = 0; g < d.group; ++g) {
        const int64_t h = kvh * d.group + g;
        for (int64_t qt = k0 / kTile; qt < d.n_tiles; ++qt) {
            const int64_t q0 = qt * kTile;
            const int q_rows = static_cast<int>(min64(kTile, d.T - q0));
            __syncthreads();  // the previous query tile's readers are done (and sK/sV/zeroing are visible)
            load_tile<HDP>(sQ, q + ((b * d.T + q0) * d.H + h) * d.hd, q_stride, q_rows, hd);
            load_tile<HDP>(sdO, dout + ((b * d.T + q0) * d.H + h) * d.hd, q_stride, q_rows, hd);
            load_row_stats(sLse, sD, lse, D, (b * d.H + h) * d.T, q0, d.T);
            __syncthreads();

            // 1. P^T and dS^T for this warp's 16 keys, one 16-query block j at a time.
            for (int j = 0; j < kTile / 16; ++j) {
                FragAcc acc_s, acc_dp;
                wmma::fill_fragment(acc_s, 0.0f);
                wmma::fill_fragment(acc_dp, 0.0f);
#pragma unroll
                for (int kk = 0; kk < HDP / 16; ++kk) {
                    FragA a;
                    FragBCol bt;
                    // S^T[key][query] = sum_c K[key][c] Q[query][c]: B[c][query] = sQ[query*ld + c], col-major.
                    wmma::load_matrix_sync(a, sK + w0 * L::tile + kk * 16, L::tile);
                    wmma::load_matrix_sync(bt, sQ + (j * 16) * L::tile + kk * 16, L::tile);
                    wmma::mma_sync(acc_s, a, bt, acc_s);
                    // dP^T[key][query] = sum_c V[key][c] dO[query][c].
                    wmma::load_matrix_sync(a, sV + w0 * L::tile + kk * 16, L::tile);
                    wmma::load_matrix_sync(bt, sdO + (j * 16) * L::tile + kk * 16, L::tile);
                    wmma::mma_sync(acc_dp, a, bt, acc_dp);
                }
                wmma::store_matrix_sync(wS, acc_s, L::warp, wmma::mem_row_major);
                wmma::store_matrix_sync(wdP, acc_dp, L::warp, wmma::mem_row_major);
                __syncwarp();
#pragma unroll
                for (int i = 0; i < 8; ++i) {
                    const int e = lane + 32 * i;      // 0 .. 255 over the 16x16 block
                    const int r = e / 16, c = e % 16;  // r: key within the warp's rows, c: query within block j
                    const int qc = j * 16 + c;         // query row within the tile
                    const int64_t key = k0 + w0 + r, query = q0 + qc;
                    float p = 0.0f, ds = 0.0f;
                    if (query < d.T && key <= query) {
                        p = expf(wS[r * L::warp + c] * d.scale - sLse[qc]);
                        ds = p * (wdP[r * L::warp + c] - sD[qc]);
                    }
                    sPt[(w0 + r) * L::prob + qc] = to_bf16(p);
                    sdSt[(w0 + r) * L::prob + qc] = to_bf16(ds);
                }
                __syncwarp();  // scratch is read before the next block overwrites it; sPt/sdSt complete
            }

            // 2. dV_w += P^T_w dO ; dK_w += dS^T_w Q   (B[query][c] = sdO/sQ[query*ld + c], row-major)
            for (int c16 = 0; c16 < HDP / 16; ++c16) {
                FragAcc acc_v, acc_k;
                wmma::load_matrix_sync(acc_v, sdV + w0 * L::acc + c16 * 16, L::acc, wmma::mem_row_major);
                wmma::load_matrix_sync(acc_k, sdK + w0 * L::acc + c16 * 16, L::acc, wmma::mem_row_major);
#pragma unroll
                for (int kk = 0; kk < kTile / 16; ++kk) {
                    FragA a;
                    FragBRow bm;
                    wmma::load_matrix_sync(a, sPt + w0 * L::prob + kk * 16, L::prob);
                    wmma::load_matrix_sync(bm, sdO + (kk * 16) * L::tile + c16 * 16, L::tile);
                    wmma::mma_sync(acc_v, a, bm, acc_v);
                    wmma::load_matrix_sync(a, sdSt + w0 * L::prob + kk * 16, L::prob);
                    wmma::load_matrix_sync(bm, sQ + (kk * 16) * L::tile + c16 * 16, L::tile);
                    wmma::mma_sync(acc_k, a, bm, acc_k);
                }
                wmma::store_matrix_sync(sdV + w0 * L::acc + c16 * 16, acc_v, L::acc, wmma::mem_row_major);
                wmma::store_matrix_sync(sdK + w0 * L::acc + c16 * 16, acc_k, L::acc, wmma::mem_row_major);
            }
            __syncwarp();
        }
    }
    __syncthreads();

    // dk += scale * dK ; dv += dV (bf16 read-add-write; this block is the only writer of these rows).
    for (int i = threadIdx.x; i < k_rows * hd; i += kThreads) {
        const int r = i / hd, c = i % hd;
        const int64_t off = ((b * d.T + k0 + r) * d.KV + kvh) * d.hd + c;
        dk[off] = to_bf16(to_f32(dk[off]) + d.scale * sdK[r * L::acc + c]);
        dv[off] = to_bf16(to_f32(dv[off]) + sdV[r * L::acc + c]);
    }
}

// ---- backward kernel B: dQ ----------------------------------------------------------------------------------
// One block per (b, h, query tile), last (heaviest) query tiles first as in the forward.
// For each key tile kt = 0 .. (last query row) / 64:
//   1. per 16x16 block (warp w's 16 queries x key block j): S = Q_w K_j^T, dP = dO_w V_j^T (wmma, scratch),
//      P = exp(scale S - lse), dS = P (dP - D) -> bf16 into sdS (warp's rows)
//   2. dQ_w += dS_w K   (wmma, accumulator round-trips through shared f32)
// At the end dq += scale * dQ (bf16 read-add-write).
template <int HDP>
__global__ void __launch_bounds__(kThreads) attention_backward_dq_kernel(
    bf16* __restrict__ dq, const bf16* __restrict__ dout, const bf16* __restrict__ q, const bf16* __restrict__ k,
    const bf16* __restrict__ v, const float* __restrict__ lse, const float* __restrict__ D, Dims d) {
    using L = Ld<HDP>;
    using S = DqSmem<HDP>;
    extern __shared__ __align__(128) unsigned char smem[];
    bf16* sQ = reinterpret_cast<bf16*>(smem + S::q);
    bf16* sdO = reinterpret_cast<bf16*>(smem + S::dout);
    bf16* sK = reinterpret_cast<bf16*>(smem + S::k);
    bf16* sV = reinterpret_cast<bf16*>(smem + S::v);
    bf16* sdS = reinterpret_cast<bf16*>(smem + S::ds);
    float* sdQ = reinterpret_cast<float*>(smem + S::dq);
    float* sLse = reinterpret_cast<float*>(smem + S::lse);
    float* sD = reinterpret_cast<float*>(smem + S::d);

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int w0 = warp * kWarpRows;
    float* wS = reinterpret_cast<float*>(smem + S::ws) + warp * 16 * L::warp;
    float* wdP = reinterpret_cast<float*>(smem + S::wdp) + warp * 16 * L::warp;

    const int64_t BH = d.B * d.H;
    const int64_t qt = d.n_tiles - 1 - static_cast<int64_t>(blockIdx.x) / BH;
    const int64_t bh = static_cast<int64_t>(blockIdx.x) % BH;
    const int64_t b = bh / d.H, h = bh % d.H, kvh = h / d.group;
    const int64_t q0 = qt * kTile;
    const int q_rows = static_cast<int>(min64(kTile, d.T - q0));
    const int hd = static_cast<int>(d.hd);
    const int64_t q_stride = d.H * d.hd, kv_stride = d.KV * d.hd;

    for (int i = threadIdx.x; i < kTile * L::acc; i += kThreads) sdQ[i] = 0.0f;
    load_tile<HDP>(sQ, q + ((b * d.T + q0) * d.H + h) * d.hd, q_stride, q_rows, hd);
    load_tile<HDP>(sdO, dout + ((b * d.T + q0) * d.H + h) * d.hd, q_stride, q_rows, hd);
    load_row_stats(sLse, sD, lse, D, (b * d.H + h) * d.T, q0, d.T);

    const int64_t n_kv = (q0 + q_rows - 1) / kTile + 1;
    for (int64_t kt = 0; kt < n_kv; ++kt) {
        const int64_t k0 = kt * kTile;
        const int k_rows = static_cast<int>(min64(kTile, d.T - k0));
        __syncthreads();  // previous key tile's readers are done (and the loads above are visible)
        load_tile<HDP>(sK, k + ((b * d.T + k0) * d.KV + kvh) * d.hd, kv_stride, k_rows, hd);
        load_tile<HDP>(sV, v + ((b * d.T + k0) * d.KV + kvh) * d.hd, kv_stride, k_rows, hd);
        __syncthreads();

        // 1. P and dS for this warp's 16 queries, one 16-key block j at a time.
        for (int j = 0; j < kTile / 16; ++j) {
            FragAcc acc_s, acc_dp;
            wmma::fill_fragment(acc_s, 0.0f);
            wmma::fill_fragment(acc_dp, 0.0f);
#pragma unroll
            for (int kk = 0; kk < HDP / 16; ++kk) {
                FragA a;
                FragBCol bt;
                // S[query][key] = sum_c Q[query][c] K[key][c]: B[c][key] = sK[key*ld + c], col-major.
                wmma::load_matrix_sync(a, sQ + w0 * L::tile + kk * 16, L::tile);
                wmma::load_matrix_sync(bt, sK + (j * 16) * L::tile + kk * 16, L::tile);
                wmma::mma_sync(acc_s, a, bt, acc_s);
                // dP[query][key] = sum_c dO[query][c] V[key][c].
                wmma::load_matrix_sync(a, sdO + w0 * L::tile + kk * 16, L::tile);
                wmma::load_matrix_sync(bt, sV + (j * 16) * L::tile + kk * 16, L::tile);
                wmma::mma_sync(acc_dp, a, bt, acc_dp);
            }
            wmma::store_matrix_sync(wS, acc_s, L::warp, wmma::mem_row_major);
            wmma::store_matrix_sync(wdP, acc_dp, L::warp, wmma::mem_row_major);
            __syncwarp();
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                const int e = lane + 32 * i;
                const int r = e / 16, c = e % 16;  // r: query within the warp's rows, c: key within block j
                const int qr = w0 + r;             // query row within the tile
                const int64_t query = q0 + qr, key = k0 + j * 16 + c;
                float ds = 0.0f;
                if (query < d.T && key <= query) {
                    const float p = expf(wS[r * L::warp + c] * d.scale - sLse[qr]);
                    ds = p * (wdP[r * L::warp + c] - sD[qr]);
                }
                sdS[qr * L::prob + j * 16 + c] = to_bf16(ds);
            }
            __syncwarp();
        }

        // 2. dQ_w += dS_w K   (B[key][c] = sK[key*ld + c], row-major)
        for (int c16 = 0; c16 < HDP / 16; ++c16) {
            FragAcc acc;
            wmma::load_matrix_sync(acc, sdQ + w0 * L::acc + c16 * 16, L::acc, wmma::mem_row_major);
#pragma unroll
            for (int kk = 0; kk < kTile / 16; ++kk) {
                FragA a;
                FragBRow bm;
                wmma::load_matrix_sync(a, sdS + w0 * L::prob + kk * 16, L::prob);
                wmma::load_matrix_sync(bm, sK + (kk * 16) * L::tile + c16 * 16, L::tile);
                wmma::mma_sync(acc, a, bm, acc);
            }
            wmma::store_matrix_sync(sdQ + w0 * L::acc + c16 * 16, acc, L::acc, wmma::mem_row_major);
        }
        __syncwarp();
    }
    __syncthreads();

    for (int i = threadIdx.x; i < q_rows * hd; i += kThreads) {
        const int r = i / hd, c = i % hd;
        const int64_t off = ((b * d.T + q0 + r) * d.H + h) * d.hd + c;
        dq[off] = to_bf16(to_f32(dq[off]) + d.scale * sdQ[r * L::acc + c]);
    }
}

}  // namespace nb::cuda::attn

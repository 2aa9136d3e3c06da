// Causal grouped-query attention, scale = 1/sqrt(hd): explicit score tiles, every product one single-threaded
// sgemm (src/cpu/tiled_gemm.h, sgemm_one_tile).
//
// q[B,T,H,hd], k/v[B,T,KV,hd], out[B,T,H,hd], lse[B,H,T]; query head h reads kv head h / (H/KV).
// For one (b, h) the heads are strided views: row t of Q is q + ((b*T + t)*H + h)*hd with row stride H*hd, and
// K/V rows have stride KV*hd; sgemm reads them in place (no transposed copies).
//
// Causality is exploited by query-row tiles of kTile rows: rows [r0, r1) only see keys [0, r1), so each tile's
// products run over r1 columns instead of T. The tiling is fixed (not thread dependent), so results are too.
//
// forward:  S = scale Q K^T (masked j > t), P = softmax_row(S), O = P V, lse_t = log sum_j exp(S_tj)
// backward: P = exp(S - lse) (recomputed), D_t = sum_c dO_tc O_tc,
//           dV += P^T dO, dP = dO V^T, dS = P * (dP - D), dQ += scale dS K, dK += scale dS^T Q
//
// Threads (src/cpu/cpu_threads.h): the forward's tasks are the (b, h, query tile) triples, each writing its own
// rows of out and lse. The backward's tasks are the (b, kv head) pairs: one task visits the group's H/KV query
// heads in order, and their query tiles in order, so the dK/dV sums add up in one order whatever the thread count,
// the same order as one thread visiting (b, h, tile) in turn.

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "src/cpu/cpu_ops.h"
#include "src/cpu/cpu_threads.h"
#include "src/cpu/tiled_gemm.h"
#include "src/ops/layer_checks.h"

namespace nb {

namespace {

constexpr int64_t kTile = 64;  // query rows per tile

struct AttnDims {
    int64_t B, T, H, KV, hd;
    int64_t Tk = T;  // keys per sequence: T, or more when decoding with a cache (attention_forward_cached)
    int64_t group() const { return H / KV; }
    int64_t q_stride() const { return H * hd; }    // between consecutive tokens in q/out
    int64_t kv_stride() const { return KV * hd; }  // between consecutive tokens in k/v
    // Element offset of row 0 of head h (of H or KV heads) in batch b.
    int64_t q_offset(int64_t b, int64_t h) const { return b * T * H * hd + h * hd; }
    int64_t kv_offset(int64_t b, int64_t h) const { return b * Tk * KV * hd + (h / group()) * hd; }
};

// The problem size of q and k (after check_attention_forward or _backward).
AttnDims dims_of(const Tensor& q, const Tensor& k) {
    return {q.dim(0), q.dim(1), q.dim(2), k.dim(2), q.dim(3), k.dim(1)};
}

float attention_scale(int64_t hd) { return static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd))); }

// S[0:m, 0:cols] = scale * Q[r0:r0+m] K[0:cols]^T, S row stride ld.
void scores(float* S, int64_t ld, const float* q, const float* k, int64_t m, int64_t cols, const AttnDims& d,
            float scale) {
    cpu::sgemm_one_tile(false, true, m, cols, d.hd, scale, q, d.q_stride(), k, d.kv_stride(), 0.0f, S, ld);
}

// Row softmax of the causal rows at positions t = r0 .. r0+m-1 in place (columns j > t become 0); returns lse per
// row. Max-subtracted exp in float; the normalizer is summed in double.
void causal_softmax_rows(float* S, int64_t ld, int64_t r0, int64_t m, int64_t cols, float* lse_out) {
    for (int64_t i = 0; i < m; ++i) {
        float* row = S + i * ld;
        const int64_t visible = r0 + i + 1;  // keys 0 .. t
        float mx = -std::numeric_limits<float>::infinity();
        for (int64_t j = 0; j < visible; ++j) mx = std::max(mx, row[j]);
        double sum = 0.0;
        for (int64_t j = 0; j < visible; ++j) {
            row[j] = std::exp(row[j] - mx);
            sum += row[j];
        }
        const float inv = static_cast<float>(1.0 / sum);
        for (int64_t j = 0; j < visible; ++j) row[j] *= inv;
        for (int64_t j = visible; j < cols; ++j) row[j] = 0.0f;
        lse_out[i] = static_cast<float>(static_cast<double>(mx) + std::log(sum));
    }
}

// P = exp(S - lse) on the causal part of rows r0 .. r0+m-1, 0 above the diagonal.
void recompute_probs(float* S, int64_t ld, int64_t r0, int64_t m, int64_t cols, const float* lse) {
    for (int64_t i = 0; i < m; ++i) {
        float* row = S + i * ld;
        const int64_t visible = r0 + i + 1;
        for (int64_t j = 0; j < visible; ++j) row[j] = std::exp(row[j] - lse[i]);
        for (int64_t j = visible; j < cols; ++j) row[j] = 0.0f;
    }
}

// The forward's operands as raw pointers (checked by the caller).
struct ForwardOperands {
    const float *q, *k, *v;
    float* out;
};

// Query rows [r0, r0 + m) of head h in batch b, at positions first + r0 .. with first = Tk - T (0 but when decoding
// with a cache): S = scale Q K[0:cols]^T over the cols = first + r0 + m keys they may see, the causal softmax, and
// O = P V[0:cols]; the rows' lse into lse_rows.
void forward_tile(const ForwardOperands& t, const AttnDims& d, int64_t b, int64_t h, int64_t r0, float* lse_rows) {
    const int64_t first = d.Tk - d.T;
    const int64_t m = std::min(kTile, d.T - r0), cols = first + r0 + m;
    std::vector<float> S(static_cast<size_t>(m * cols));
    scores(S.data(), cols, t.q + d.q_offset(b, h) + r0 * d.q_stride(), t.k + d.kv_offset(b, h), m, cols, d,
           attention_scale(d.hd));
    causal_softmax_rows(S.data(), cols, first + r0, m, cols, lse_rows);
    cpu::sgemm_one_tile(false, false, m, d.hd, cols, 1.0f, S.data(), cols, t.v + d.kv_offset(b, h), d.kv_stride(),
                        0.0f, t.out + d.q_offset(b, h) + r0 * d.q_stride(), d.q_stride());
}

// The backward's operands as raw pointers (checked by check_attention_backward).
struct AttnTensors {
    const float *q, *k, *v, *out, *dout, *lse;
    float *dq, *dk, *dv;
};
// The backward of query head h of batch b, its query tiles in order: dQ of the head, and its share of dK/dV of
// its kv head (added to what the group's earlier heads left there).
void attention_backward_head(const AttnTensors& t, const AttnDims& d, int64_t b, int64_t h, float scale) {
    const int64_t qs = d.q_stride(), ks = d.kv_stride();
    const float* qh = t.q + d.q_offset(b, h);
    const float* oh = t.out + d.q_offset(b, h);
    const float* doh = t.dout + d.q_offset(b, h);
    float* dqh = t.dq + d.q_offset(b, h);
    const float* kh = t.k + d.kv_offset(b, h);
    const float* vh = t.v + d.kv_offset(b, h);
    float* dkh = t.dk + d.kv_offset(b, h);
    float* dvh = t.dv + d.kv_offset(b, h);
    const float* lh = t.lse + (b * d.H + h) * d.T;
    std::vector<float> P(static_cast<size_t>(kTile * d.T)), dS(static_cast<size_t>(kTile * d.T));
    for (int64_t r0 = 0; r0 < d.T; r0 += kTile) {
        const int64_t m = std::min(kTile, d.T - r0), cols = r0 + m;
        const float* qt = qh + r0 * qs;
        const float* dot = doh + r0 * qs;
        scores(P.data(), cols, qt, kh, m, cols, d, scale);
        recompute_probs(P.data(), cols, r0, m, cols, lh + r0);
        // dV[0:cols] += P^T dO[r0:r0+m]
        cpu::sgemm_one_tile(true, false, cols, d.hd, m, 1.0f, P.data(), cols, dot, qs, 1.0f, dvh, ks);
        // dP = dO[r0:r0+m] V[0:cols]^T, into dS
        cpu::sgemm_one_tile(false, true, m, cols, d.hd, 1.0f, dot, qs, vh, ks, 0.0f, dS.data(), cols);
        // D_t = sum_c dO_tc O_tc ; dS = P * (dP - D) (0 where P is masked)
        for (int64_t i = 0; i < m; ++i) {
            const float* o_row = oh + (r0 + i) * qs;
            const float* do_row = dot + i * qs;
            double acc = 0.0;
            for (int64_t c = 0; c < d.hd; ++c) acc += static_cast<double>(do_row[c]) * o_row[c];
            const float Di = static_cast<float>(acc);
            const float* p_row = P.data() + i * cols;
            float* ds_row = dS.data() + i * cols;
            for (int64_t j = 0; j < cols; ++j) ds_row[j] = p_row[j] * (ds_row[j] - Di);
        }
        // dQ[r0:r0+m] += scale dS K[0:cols]
        cpu::sgemm_one_tile(false, false, m, d.hd, cols, scale, dS.data(), cols, kh, ks, 1.0f, dqh + r0 * qs, qs);
        // dK[0:cols] += scale dS^T Q[r0:r0+m]
        cpu::sgemm_one_tile(true, false, cols, d.hd, m, scale, dS.data(), cols, qt, qs, 1.0f, dkh, ks);
    }
}

}  // namespace

void CpuOps::attention_forward(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v) {
    const OpTimer timer(*this, "attention_forward");
    check_attention_forward(out, lse, q, k, v);
    const AttnDims d = dims_of(q, k);
    if (d.B == 0 || d.T == 0) return;
    const int64_t tiles = (d.T + kTile - 1) / kTile;
    const ForwardOperands t{q.f32(), k.f32(), v.f32(), out.f32()};
    float* lp = lse.f32();
    cpu::parallel_for(d.B * d.H * tiles, [&](int64_t task) {
        const int64_t b = task / (d.H * tiles), h = (task / tiles) % d.H, r0 = (task % tiles) * kTile;
        forward_tile(t, d, b, h, r0, lp + (b * d.H + h) * d.T + r0);
    });
}

// Decoding: the T new queries stand at positions Tk - T .. Tk - 1 of their sequence; the same tiles, each seeing
// the keys up to its own last position. lse goes to a scratch row (generation keeps none).
void CpuOps::attention_forward_cached(Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v) {
    const OpTimer timer(*this, "attention_forward_cached");
    check_attention_forward_cached(out, q, k, v);
    const AttnDims d = dims_of(q, k);
    if (d.B == 0 || d.T == 0) return;
    const int64_t tiles = (d.T + kTile - 1) / kTile;
    const ForwardOperands t{q.f32(), k.f32(), v.f32(), out.f32()};
    cpu::parallel_for(d.B * d.H * tiles, [&](int64_t task) {
        const int64_t b = task / (d.H * tiles), h = (task / tiles) % d.H, r0 = (task % tiles) * kTile;
        std::vector<float> lse(static_cast<size_t>(kTile));
        forward_tile(t, d, b, h, r0, lse.data());
    });
}

void CpuOps::attention_backward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout, const Tensor& q,
                                const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse) {
    const OpTimer timer(*this, "attention_backward");
    check_attention_backward(dq, dk, dv, dout, q, k, v, out, lse);
    const AttnDims d = dims_of(q, k);
    if (d.B == 0 || d.T == 0) return;
    const float scale = attention_scale(d.hd);
    const AttnTensors t{q.f32(), k.f32(), v.f32(), out.f32(), dout.f32(), lse.f32(), dq.f32(), dk.f32(), dv.f32()};
    cpu::parallel_for(d.B * d.KV, [&](int64_t task) {
        const int64_t b = task / d.KV, g = task % d.KV;
        for (int64_t h = g * d.group(); h < (g + 1) * d.group(); ++h) attention_backward_head(t, d, b, h, scale);
    });
}

}  // namespace nb

// Rotary position embedding, rotate-half convention (HF LLaMA), on x[N, heads, head_dim], pos = n % seq_len
// (rope_forward_at, for decoding with a KV cache: pos = first_position + n).
//
// For i < half = head_dim / 2 and angle = pos * theta^(-2i / head_dim):
//   out[i]        = x[i] cos - x[i+half] sin
//   out[i+half]   = x[i+half] cos + x[i] sin
// The angle and its cos/sin are computed in double and rounded once to float, so the table is the most accurate
// float table there is (torch computes inv_freq and the angle in float and differs by ~1e-7 * pos at large pos).
// out may alias x (each pair is read before it is written).
#include <algorithm>
#include <cmath>
#include <vector>

#include "src/cpu/cpu_ops.h"
#include "src/ops/layer_checks.h"

namespace nb {

namespace {

// cos/sin of every (position, frequency) pair, [positions, half] each.
struct RopeTable {
    int64_t positions = -1, head_dim = -1;
    float theta = 0.0f;
    std::vector<float> cos, sin;
};

void fill_rope_table(RopeTable& t, int64_t positions, int64_t head_dim, float theta) {
    const int64_t half = head_dim / 2;
    t.cos.resize(static_cast<size_t>(positions * half));
    t.sin.resize(static_cast<size_t>(positions * half));
    for (int64_t i = 0; i < half; ++i) {
        const double inv_freq = std::pow(static_cast<double>(theta), -2.0 * static_cast<double>(i) / head_dim);
        for (int64_t p = 0; p < positions; ++p) {
            const double angle = static_cast<double>(p) * inv_freq;
            t.cos[static_cast<size_t>(p * half + i)] = static_cast<float>(std::cos(angle));
            t.sin[static_cast<size_t>(p * half + i)] = static_cast<float>(std::sin(angle));
        }
    }
    t.positions = positions;
    t.head_dim = head_dim;
    t.theta = theta;
}

// A table of at least `positions` rows for the last (head_dim, theta) this thread asked for: a model asks for one
// (q and k share it), so a one-entry cache per thread is enough and needs no lock. An entry does not depend on
// the table's length, so a longer table serves a shorter need with the same bits (decoding grows it, at most
// doubling, so a generation of T tokens builds it O(log T) times).
const RopeTable& rope_table(int64_t positions, int64_t head_dim, float theta) {
    thread_local RopeTable table;
    if (table.head_dim != head_dim || table.theta != theta) table.positions = -1;
    if (table.positions < positions)
        fill_rope_table(table, std::max(positions, 2 * table.positions), head_dim, theta);
    return table;
}

// Rotate every (i, i+half) pair of x, row n at position first_position + n % seq_len, by +angle (sign = +1,
// forward) or -angle (sign = -1, the transpose), and write (accumulate = false) or add (accumulate = true) into out.
void rope_apply(float* out, const float* x, int64_t n_rows, int64_t heads, int64_t head_dim, int64_t seq_len,
                int64_t first_position, float theta, float sign, bool accumulate) {
    const RopeTable& t = rope_table(first_position + seq_len, head_dim, theta);
    const int64_t half = head_dim / 2;
    for (int64_t n = 0; n < n_rows; ++n) {
        const int64_t pos = first_position + n % seq_len;
        const float* c = t.cos.data() + pos * half;
        const float* s = t.sin.data() + pos * half;
        for (int64_t h = 0; h < heads; ++h) {
            const float* xr = x + (n * heads + h) * head_dim;
            float* o = out + (n * heads + h) * head_dim;
            for (int64_t i = 0; i < half; ++i) {
                const float a = xr[i], b = xr[i + half], si = sign * s[i];
                const float lo = a * c[i] - b * si;
                const float hi = b * c[i] + a * si;
                if (accumulate) {
                    o[i] += lo;
                    o[i + half] += hi;
                } else {
                    o[i] = lo;
                    o[i + half] = hi;
                }
            }
        }
    }
}

}  // namespace

void CpuOps::rope_forward(Tensor& out, const Tensor& x, int64_t seq_len, float theta) {
    const OpTimer timer(*this, "rope_forward");
    check_rope_forward(out, x, seq_len);
    rope_apply(out.f32(), x.f32(), x.dim(0), x.dim(1), x.dim(2), seq_len, 0, theta, 1.0f, false);
}

void CpuOps::rope_forward_at(Tensor& out, const Tensor& x, int64_t first_position, float theta) {
    const OpTimer timer(*this, "rope_forward_at");
    check_rope_forward_at(out, x, first_position);
    if (x.dim(0) == 0) return;
    rope_apply(out.f32(), x.f32(), x.dim(0), x.dim(1), x.dim(2), x.dim(0), first_position, theta, 1.0f, false);
}

// The rotation R is orthogonal, so the gradient is R^T dout = rotate(dout, -angle):
//   din[i]      += dout[i] cos + dout[i+half] sin
//   din[i+half] += dout[i+half] cos - dout[i] sin
void CpuOps::rope_backward(Tensor& din, const Tensor& dout, int64_t seq_len, float theta) {
    const OpTimer timer(*this, "rope_backward");
    check_rope_backward(din, dout, seq_len);
    rope_apply(din.f32(), dout.f32(), dout.dim(0), dout.dim(1), dout.dim(2), seq_len, 0, theta, -1.0f, true);
}

}  // namespace nb

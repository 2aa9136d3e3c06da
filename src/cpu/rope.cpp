// Rotary position embedding, rotate-half convention (HF LLaMA), on x[N, heads, head_dim], pos = n % seq_len.
//
// For i < half = head_dim / 2 and angle = pos * theta^(-2i / head_dim):
//   out[i]        = x[i] cos - x[i+half] sin
//   out[i+half]   = x[i+half] cos + x[i] sin
// The angle and its cos/sin are computed in double and rounded once to float, so the table is the most accurate
// float table there is (torch computes inv_freq and the angle in float and differs by ~1e-7 * pos at large pos).
// out may alias x (each pair is read before it is written).
#include <cmath>
#include <vector>

#include "src/cpu/cpu_ops.h"
#include "src/ops/layer_checks.h"

namespace nb {

namespace {

// cos/sin of every (position, frequency) pair, [seq_len, half] each.
struct RopeTable {
    int64_t seq_len = -1, head_dim = -1;
    float theta = 0.0f;
    std::vector<float> cos, sin;
};

void fill_rope_table(RopeTable& t, int64_t seq_len, int64_t head_dim, float theta) {
    const int64_t half = head_dim / 2;
    t.cos.resize(static_cast<size_t>(seq_len * half));
    t.sin.resize(static_cast<size_t>(seq_len * half));
    for (int64_t i = 0; i < half; ++i) {
        const double inv_freq = std::pow(static_cast<double>(theta), -2.0 * static_cast<double>(i) / head_dim);
        for (int64_t p = 0; p < seq_len; ++p) {
            const double angle = static_cast<double>(p) * inv_freq;
            t.cos[static_cast<size_t>(p * half + i)] = static_cast<float>(std::cos(angle));
            t.sin[static_cast<size_t>(p * half + i)] = static_cast<float>(std::sin(angle));
        }
    }
    t.seq_len = seq_len;
    t.head_dim = head_dim;
    t.theta = theta;
}

// The table for the last (seq_len, head_dim, theta) this thread asked for: a model asks for one or two (q and k
// share it), so a one-entry cache per thread is enough and needs no lock.
const RopeTable& rope_table(int64_t seq_len, int64_t head_dim, float theta) {
    thread_local RopeTable table;
    if (table.seq_len != seq_len || table.head_dim != head_dim || table.theta != theta)
        fill_rope_table(table, seq_len, head_dim, theta);
    return table;
}

// Rotate every (i, i+half) pair of x by +angle (sign = +1, forward) or -angle (sign = -1, the transpose), and
// write (accumulate = false) or add (accumulate = true) into out.
void rope_apply(float* out, const float* x, int64_t n_rows, int64_t heads, int64_t head_dim, int64_t seq_len,
                float theta, float sign, bool accumulate) {
    const RopeTable& t = rope_table(seq_len, head_dim, theta);
    const int64_t half = head_dim / 2;
    for (int64_t n = 0; n < n_rows; ++n) {
        const int64_t pos = n % seq_len;
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
    rope_apply(out.f32(), x.f32(), x.dim(0), x.dim(1), x.dim(2), seq_len, theta, 1.0f, false);
}

// The rotation R is orthogonal, so the gradient is R^T dout = rotate(dout, -angle):
//   din[i]      += dout[i] cos + dout[i+half] sin
//   din[i+half] += dout[i+half] cos - dout[i] sin
void CpuOps::rope_backward(Tensor& din, const Tensor& dout, int64_t seq_len, float theta) {
    const OpTimer timer(*this, "rope_backward");
    check_rope_backward(din, dout, seq_len);
    rope_apply(din.f32(), dout.f32(), dout.dim(0), dout.dim(1), dout.dim(2), seq_len, theta, -1.0f, true);
}

}  // namespace nb

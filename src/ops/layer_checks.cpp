#include "src/ops/layer_checks.h"

#include <stdexcept>

#include <fmt/format.h>

namespace nb {

namespace {

// Rows of a tensor whose last dim is `cols` (a rank >= 1 tensor read as [numel / cols, cols]).
int64_t rows_of(const Tensor& t, int64_t cols) { return cols == 0 ? 0 : t.numel() / cols; }

// x[.., in], w[out, in], y[.., out] with the same number of rows.
LinearDims check_linear(const char* op, const Tensor& y, const Tensor& x, const Tensor& w) {
    if (w.rank() != 2 || x.rank() < 1 || y.rank() < 1 || x.dim(-1) != w.dim(1) || y.dim(-1) != w.dim(0) ||
        rows_of(x, w.dim(1)) != rows_of(y, w.dim(0)))
        throw std::invalid_argument(
            fmt::format("{}: expected x [N, in], w [out, in], y/dy [N, out]; got x {}, w {}, y {}", op,
                        shape_string(x.shape()), shape_string(w.shape()), shape_string(y.shape())));
    return {rows_of(x, w.dim(1)), w.dim(1), w.dim(0)};
}

void check_embedding(const char* op, const Tensor& rows, const Tensor& tokens, const Tensor& table) {
    if (table.rank() != 2 || rows.rank() < 1 || rows.dim(-1) != table.dim(1) ||
        rows.numel() != tokens.numel() * table.dim(1))
        throw std::invalid_argument(
            fmt::format("{}: expected tokens [N], table [V, d], out [N, d]; got tokens {}, "
                        "table {}, out {}",
                        op, shape_string(tokens.shape()), shape_string(table.shape()), shape_string(rows.shape())));
}

// Rows of x, after checking x [N, d], gain [d], and the other per-element tensor (y or dy) and rstd [N].
int64_t check_rmsnorm(const char* op, const Tensor& y, const Tensor& rstd, const Tensor& x, const Tensor& gain) {
    const bool ok = x.rank() >= 1 && gain.rank() == 1 && x.dim(-1) == gain.dim(0) && y.numel() == x.numel() &&
                    y.rank() >= 1 && y.dim(-1) == x.dim(-1) &&
                    (gain.dim(0) == 0 || rstd.numel() == x.numel() / gain.dim(0));
    if (!ok)
        throw std::invalid_argument(
            fmt::format("{}: expected x [N, d], gain [d], y/dy [N, d], rstd [N]; got x {}, "
                        "gain {}, y/dy {}, rstd {}",
                        op, shape_string(x.shape()), shape_string(gain.shape()), shape_string(y.shape()),
                        shape_string(rstd.shape())));
    return gain.dim(0) == 0 ? 0 : x.numel() / gain.dim(0);
}

void check_rope(const char* op, const Tensor& out, const Tensor& x, int64_t seq_len) {
    if (x.rank() != 3 || out.shape() != x.shape() || x.dim(2) % 2 != 0 || seq_len <= 0 || x.dim(0) % seq_len != 0)
        throw std::invalid_argument(
            fmt::format("{}: expected x and out [N, heads, head_dim] with even head_dim and N a "
                        "multiple of seq_len {}; got x {}, out {}",
                        op, seq_len, shape_string(x.shape()), shape_string(out.shape())));
}

void check_attention(const char* op, const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k,
                     const Tensor& v) {
    bool ok = q.rank() == 4 && k.rank() == 4 && k.shape() == v.shape() && out.shape() == q.shape();
    if (ok) {
        ok = k.dim(0) == q.dim(0) && k.dim(1) == q.dim(1) && k.dim(3) == q.dim(3) && k.dim(2) > 0 &&
             q.dim(2) % k.dim(2) == 0 && q.dim(3) > 0 && lse.shape() == Shape{q.dim(0), q.dim(2), q.dim(1)};
    }
    if (!ok)
        throw std::invalid_argument(
            fmt::format("{}: expected q/out [B,T,H,hd], k/v [B,T,KV,hd] with H % KV == 0 and hd > 0, lse "
                        "[B,H,T]; got q {}, k {}, v {}, out {}, lse {}",
                        op, shape_string(q.shape()), shape_string(k.shape()), shape_string(v.shape()),
                        shape_string(out.shape()), shape_string(lse.shape())));
}

void check_same(const char* op, const Tensor& a, const Tensor& b, const Tensor& c) {
    if (a.shape() != b.shape() || a.shape() != c.shape())
        throw std::invalid_argument(fmt::format("{}: all tensors must have one shape; got {}, {}, {}", op,
                                                shape_string(a.shape()), shape_string(b.shape()),
                                                shape_string(c.shape())));
}

int64_t check_cross_entropy(const char* op, const Tensor& logits, const Tensor& targets) {
    if (logits.rank() < 1 || logits.dim(-1) == 0 || logits.numel() / logits.dim(-1) != targets.numel())
        throw std::invalid_argument(
            fmt::format("{}: expected logits [N, V] with V > 0 and targets [N]; got logits {}, "
                        "targets {}",
                        op, shape_string(logits.shape()), shape_string(targets.shape())));
    return targets.numel();
}

void check_row_vector(const char* op, const char* name, const Tensor& t, int64_t n) {
    if (t.numel() != n)
        throw std::invalid_argument(
            fmt::format("{}: {} {} must hold one value per row ({})", op, name, shape_string(t.shape()), n));
}

}  // namespace

LinearDims check_linear_forward(const Tensor& y, const Tensor& x, const Tensor& w) {
    return check_linear("linear_forward", y, x, w);
}

LinearDims check_linear_backward(const Tensor& dx, const Tensor& dw, const Tensor& dy, const Tensor& x,
                                 const Tensor& w) {
    const LinearDims d = check_linear("linear_backward", dy, x, w);
    if (dx.defined() && dx.numel() != x.numel())
        throw std::invalid_argument(fmt::format("linear_backward: dx {} does not match x {}", shape_string(dx.shape()),
                                                shape_string(x.shape())));
    if (dw.defined() && dw.shape() != w.shape())
        throw std::invalid_argument(fmt::format("linear_backward: dw {} does not match w {}", shape_string(dw.shape()),
                                                shape_string(w.shape())));
    return d;
}

void check_embedding_forward(const Tensor& out, const Tensor& tokens, const Tensor& table) {
    check_embedding("embedding_forward", out, tokens, table);
}

void check_embedding_backward(const Tensor& dtable, const Tensor& tokens, const Tensor& dout) {
    check_embedding("embedding_backward", dout, tokens, dtable);
}

int64_t check_rmsnorm_forward(const Tensor& y, const Tensor& rstd, const Tensor& x, const Tensor& gain) {
    return check_rmsnorm("rmsnorm_forward", y, rstd, x, gain);
}

int64_t check_rmsnorm_backward(const Tensor& dx, const Tensor& dgain, const Tensor& dy, const Tensor& x,
                               const Tensor& gain, const Tensor& rstd) {
    const int64_t n_rows = check_rmsnorm("rmsnorm_backward", dy, rstd, x, gain);
    if ((dx.defined() && dx.numel() != x.numel()) || (dgain.defined() && dgain.numel() != gain.dim(0)))
        throw std::invalid_argument(fmt::format("rmsnorm_backward: dx {} / dgain {} do not match x {} / gain {}",
                                                shape_string(dx.shape()), shape_string(dgain.shape()),
                                                shape_string(x.shape()), shape_string(gain.shape())));
    return n_rows;
}

void check_rope_forward(const Tensor& out, const Tensor& x, int64_t seq_len) {
    check_rope("rope_forward", out, x, seq_len);
}

void check_rope_backward(const Tensor& din, const Tensor& dout, int64_t seq_len) {
    check_rope("rope_backward", din, dout, seq_len);
}

void check_attention_forward(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k,
                             const Tensor& v) {
    check_attention("attention_forward", out, lse, q, k, v);
}

void check_attention_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout,
                              const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                              const Tensor& lse) {
    check_attention("attention_backward", out, lse, q, k, v);
    if (dout.shape() != q.shape() || dq.shape() != q.shape() || dk.shape() != k.shape() || dv.shape() != v.shape())
        throw std::invalid_argument(
            fmt::format("attention_backward: dout {} and dq {} must match q {}, dk {} and dv {} "
                        "must match k {}",
                        shape_string(dout.shape()), shape_string(dq.shape()), shape_string(q.shape()),
                        shape_string(dk.shape()), shape_string(dv.shape()), shape_string(k.shape())));
}

void check_rope_forward_at(const Tensor& out, const Tensor& x, int64_t first_position) {
    if (first_position < 0)
        throw std::invalid_argument(fmt::format("rope_forward_at: first_position {} is negative", first_position));
    if (x.rank() == 3 && x.dim(0) > 0) check_rope("rope_forward_at", out, x, x.dim(0));
    else check_rope("rope_forward_at", out, x, 1);
}

void check_attention_forward_cached(const Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v) {
    bool ok = q.rank() == 4 && k.rank() == 4 && k.shape() == v.shape() && out.shape() == q.shape();
    if (ok) {
        ok = k.dim(0) == q.dim(0) && k.dim(1) >= q.dim(1) && k.dim(3) == q.dim(3) && k.dim(2) > 0 &&
             q.dim(2) % k.dim(2) == 0 && q.dim(3) > 0;
    }
    if (!ok)
        throw std::invalid_argument(
            fmt::format("attention_forward_cached: expected q/out [B,Tq,H,hd], k/v [B,Tk,KV,hd] with Tk >= Tq, "
                        "H % KV == 0 and hd > 0; got q {}, k {}, v {}, out {}",
                        shape_string(q.shape()), shape_string(k.shape()), shape_string(v.shape()),
                        shape_string(out.shape())));
}

void check_swiglu_forward(const Tensor& out, const Tensor& gate, const Tensor& up) {
    check_same("swiglu_forward", out, gate, up);
}

void check_swiglu_backward(const Tensor& dgate, const Tensor& dup, const Tensor& dout, const Tensor& gate,
                           const Tensor& up) {
    check_same("swiglu_backward", dout, gate, up);
    check_same("swiglu_backward", dgate, dup, gate);
}

int64_t check_cross_entropy_forward(const Tensor& loss, const Tensor& lse, const Tensor& logits,
                                    const Tensor& targets) {
    const int64_t n = check_cross_entropy("cross_entropy_forward", logits, targets);
    check_row_vector("cross_entropy_forward", "loss", loss, n);
    check_row_vector("cross_entropy_forward", "lse", lse, n);
    return n;
}

int64_t check_cross_entropy_backward(const Tensor& dlogits, const Tensor& logits, const Tensor& lse,
                                     const Tensor& targets) {
    const int64_t n = check_cross_entropy("cross_entropy_backward", logits, targets);
    check_row_vector("cross_entropy_backward", "lse", lse, n);
    if (dlogits.shape() != logits.shape())
        throw std::invalid_argument(fmt::format("cross_entropy_backward: dlogits {} does not match logits {}",
                                                shape_string(dlogits.shape()), shape_string(logits.shape())));
    return n;
}

}  // namespace nb

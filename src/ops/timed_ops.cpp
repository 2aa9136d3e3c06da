#include "src/ops/timed_ops.h"

#include <algorithm>
#include <chrono>

namespace nb {

template <class F>
auto TimedOps::timed(const char* name, F&& call) {
    inner_.synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    struct Record {  // records even when the call returns a value
        TimedOps& self;
        const char* name;
        std::chrono::steady_clock::time_point t0;
        ~Record() {
            self.inner_.synchronize();
            OpTime& t = self.times_[name];
            t.name = name;
            t.calls += 1;
            t.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        }
    } record{*this, name, t0};
    return call();
}

std::vector<OpTime> TimedOps::report() const {
    std::vector<OpTime> out;
    for (const auto& [name, t] : times_) out.push_back(t);
    std::sort(out.begin(), out.end(), [](const OpTime& a, const OpTime& b) { return a.seconds > b.seconds; });
    return out;
}

Tensor TimedOps::zeros(const Shape& shape, DType dtype) {
    return timed("zeros (allocate + clear)", [&] { return inner_.zeros(shape, dtype); });
}
Tensor TimedOps::empty(const Shape& shape, DType dtype) {
    return timed("empty (allocate)", [&] { return inner_.empty(shape, dtype); });
}
void TimedOps::cast(Tensor& dst, const Tensor& src) { timed("cast", [&] { inner_.cast(dst, src); }); }
void TimedOps::linear_forward(Tensor& y, const Tensor& x, const Tensor& w) {
    timed("linear_forward", [&] { inner_.linear_forward(y, x, w); });
}
void TimedOps::linear_backward(Tensor& dx, Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& w) {
    timed("linear_backward", [&] { inner_.linear_backward(dx, dw, dy, x, w); });
}
void TimedOps::embedding_forward(Tensor& out, const Tensor& tokens, const Tensor& table) {
    timed("embedding_forward", [&] { inner_.embedding_forward(out, tokens, table); });
}
void TimedOps::embedding_backward(Tensor& dtable, const Tensor& tokens, const Tensor& dout) {
    timed("embedding_backward", [&] { inner_.embedding_backward(dtable, tokens, dout); });
}
void TimedOps::rmsnorm_forward(Tensor& y, Tensor& rstd, const Tensor& x, const Tensor& gain, float eps) {
    timed("rmsnorm_forward", [&] { inner_.rmsnorm_forward(y, rstd, x, gain, eps); });
}
void TimedOps::rmsnorm_backward(Tensor& dx, Tensor& dgain, const Tensor& dy, const Tensor& x, const Tensor& gain,
                                const Tensor& rstd) {
    timed("rmsnorm_backward", [&] { inner_.rmsnorm_backward(dx, dgain, dy, x, gain, rstd); });
}
void TimedOps::rope_forward(Tensor& out, const Tensor& x, int64_t seq_len, float theta) {
    timed("rope_forward", [&] { inner_.rope_forward(out, x, seq_len, theta); });
}
void TimedOps::rope_backward(Tensor& din, const Tensor& dout, int64_t seq_len, float theta) {
    timed("rope_backward", [&] { inner_.rope_backward(din, dout, seq_len, theta); });
}
void TimedOps::attention_forward(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v) {
    timed("attention_forward", [&] { inner_.attention_forward(out, lse, q, k, v); });
}
void TimedOps::attention_backward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout, const Tensor& q,
                                  const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse) {
    timed("attention_backward", [&] { inner_.attention_backward(dq, dk, dv, dout, q, k, v, out, lse); });
}
void TimedOps::swiglu_forward(Tensor& out, const Tensor& gate, const Tensor& up) {
    timed("swiglu_forward", [&] { inner_.swiglu_forward(out, gate, up); });
}
void TimedOps::swiglu_backward(Tensor& dgate, Tensor& dup, const Tensor& dout, const Tensor& gate,
                               const Tensor& up) {
    timed("swiglu_backward", [&] { inner_.swiglu_backward(dgate, dup, dout, gate, up); });
}
void TimedOps::cross_entropy_forward(Tensor& loss, Tensor& lse, const Tensor& logits, const Tensor& targets) {
    timed("cross_entropy_forward", [&] { inner_.cross_entropy_forward(loss, lse, logits, targets); });
}
void TimedOps::cross_entropy_backward(Tensor& dlogits, const Tensor& logits, const Tensor& lse,
                                      const Tensor& targets, float dloss) {
    timed("cross_entropy_backward", [&] { inner_.cross_entropy_backward(dlogits, logits, lse, targets, dloss); });
}
void TimedOps::add_inplace(Tensor& a, const Tensor& b) { timed("add_inplace", [&] { inner_.add_inplace(a, b); }); }
void TimedOps::scale_inplace(Tensor& a, float s) { timed("scale_inplace", [&] { inner_.scale_inplace(a, s); }); }
double TimedOps::sum(const Tensor& x) {
    return timed("sum", [&] { return inner_.sum(x); });
}
double TimedOps::sum_squares(const Tensor& x) {
    return timed("sum_squares", [&] { return inner_.sum_squares(x); });
}
void TimedOps::adamw_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, float lr, float beta1,
                            float beta2, float eps, float weight_decay, int64_t step) {
    timed("adamw_update", [&] { inner_.adamw_update(param, grad, m, v, lr, beta1, beta2, eps, weight_decay, step); });
}
void TimedOps::delay_compensate(Tensor& grad, const Tensor& w, const Tensor& stale, float lambda) {
    timed("delay_compensate", [&] { inner_.delay_compensate(grad, w, stale, lambda); });
}

void TimedOps::adamw_update_multi(const std::vector<AdamWParamRef>& params, float lr, float beta1, float beta2,
                                  float eps, int64_t step) {
    timed("adamw_update_multi", [&] { inner_.adamw_update_multi(params, lr, beta1, beta2, eps, step); });
}
void TimedOps::lion_update(Tensor& param, const Tensor& grad, Tensor& m, float lr, float beta1, float beta2,
                           float weight_decay) {
    timed("lion_update", [&] { inner_.lion_update(param, grad, m, lr, beta1, beta2, weight_decay); });
}
void TimedOps::adan_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& m_diff, Tensor& n,
                           Tensor& prev_grad, const AdanScalars& s) {
    timed("adan_update", [&] { inner_.adan_update(param, grad, m, m_diff, n, prev_grad, s); });
}
void TimedOps::mars_correction(Tensor& c, const Tensor& grad, const Tensor& last_grad, float scale) {
    timed("mars_correction", [&] { inner_.mars_correction(c, grad, last_grad, scale); });
}
void TimedOps::mars_update(Tensor& param, const Tensor& c, const Tensor& grad, Tensor& last_grad, Tensor& m,
                           Tensor& v, double c_norm, const MarsScalars& s) {
    timed("mars_update", [&] { inner_.mars_update(param, c, grad, last_grad, m, v, c_norm, s); });
}
void TimedOps::muon_momentum(Tensor& update, const Tensor& grad, Tensor& momentum, float mu, bool nesterov) {
    timed("muon_momentum", [&] { inner_.muon_momentum(update, grad, momentum, mu, nesterov); });
}
void TimedOps::newton_schulz(const std::vector<Tensor*>& outs, const std::vector<const Tensor*>& ins, int steps) {
    timed("newton_schulz", [&] { inner_.newton_schulz(outs, ins, steps); });
}
void TimedOps::muon_apply(Tensor& param, const Tensor& ortho, float lr, float scale, float weight_decay) {
    timed("muon_apply", [&] { inner_.muon_apply(param, ortho, lr, scale, weight_decay); });
}
void TimedOps::matmul(Tensor& c, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, float alpha,
                      float beta) {
    timed("matmul", [&] { inner_.matmul(c, a, b, trans_a, trans_b, alpha, beta); });
}
void TimedOps::symmetric_eigenvectors_descending(Tensor& vectors, const Tensor& a) {
    timed("symmetric_eigenvectors_descending", [&] { inner_.symmetric_eigenvectors_descending(vectors, a); });
}
void TimedOps::qr_orthonormal(Tensor& q, const Tensor& a) {
    timed("qr_orthonormal", [&] { inner_.qr_orthonormal(q, a); });
}
void TimedOps::column_dots(Tensor& out, const Tensor& a, const Tensor& b) {
    timed("column_dots", [&] { inner_.column_dots(out, a, b); });
}
void TimedOps::index_select(Tensor& dst, const Tensor& src, int dim, const std::vector<int64_t>& index) {
    timed("index_select", [&] { inner_.index_select(dst, src, dim, index); });
}
void TimedOps::add_to_diagonal(Tensor& a, float s) { timed("add_to_diagonal", [&] { inner_.add_to_diagonal(a, s); }); }
void TimedOps::lerp_inplace(Tensor& a, const Tensor& b, float w) {
    timed("lerp_inplace", [&] { inner_.lerp_inplace(a, b, w); });
}
void TimedOps::add_scaled_inplace(Tensor& a, const Tensor& b, float alpha) {
    timed("add_scaled_inplace", [&] { inner_.add_scaled_inplace(a, b, alpha); });
}
void TimedOps::adam_direction(Tensor& direction, Tensor& m, Tensor& v, const Tensor& g, float beta1, float beta2,
                              float eps) {
    timed("adam_direction", [&] { inner_.adam_direction(direction, m, v, g, beta1, beta2, eps); });
}

}  // namespace nb

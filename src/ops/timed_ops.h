// TimedOps: an Ops that forwards every call to another backend and records how long each op took.
//
// Why: "where does a training step spend its time" is the first question about speed, on either backend.
// Each call is bracketed by synchronize(), so on a GPU the time is the op's own and not overlapped with
// others; the totals therefore add up to slightly more than an unprofiled step. Used by `bench ... --profile`.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "src/ops/ops.h"

namespace nb {

struct OpTime {
    std::string name;
    int64_t calls = 0;
    double seconds = 0;
};

class TimedOps final : public Ops {
public:
    explicit TimedOps(Ops& inner) : inner_(inner) {}

    // Ops sorted by total time, largest first.
    std::vector<OpTime> report() const;
    void reset() { times_.clear(); }

    Device device() const override { return inner_.device(); }
    DType activation_dtype() const override { return inner_.activation_dtype(); }
    Tensor zeros(const Shape& shape, DType dtype) override;
    Tensor empty(const Shape& shape, DType dtype) override;
    void cast(Tensor& dst, const Tensor& src) override;
    void synchronize() override { inner_.synchronize(); }

    void linear_forward(Tensor& y, const Tensor& x, const Tensor& w) override;
    void linear_backward(Tensor& dx, Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& w) override;
    void embedding_forward(Tensor& out, const Tensor& tokens, const Tensor& table) override;
    void embedding_backward(Tensor& dtable, const Tensor& tokens, const Tensor& dout) override;
    void rmsnorm_forward(Tensor& y, Tensor& rstd, const Tensor& x, const Tensor& gain, float eps) override;
    void rmsnorm_backward(Tensor& dx, Tensor& dgain, const Tensor& dy, const Tensor& x, const Tensor& gain,
                          const Tensor& rstd) override;
    void rope_forward(Tensor& out, const Tensor& x, int64_t seq_len, float theta) override;
    void rope_backward(Tensor& din, const Tensor& dout, int64_t seq_len, float theta) override;
    void attention_forward(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v) override;
    void attention_backward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout, const Tensor& q, const Tensor& k,
                            const Tensor& v, const Tensor& out, const Tensor& lse) override;
    void swiglu_forward(Tensor& out, const Tensor& gate, const Tensor& up) override;
    void swiglu_backward(Tensor& dgate, Tensor& dup, const Tensor& dout, const Tensor& gate,
                         const Tensor& up) override;
    void cross_entropy_forward(Tensor& loss, Tensor& lse, const Tensor& logits, const Tensor& targets) override;
    void cross_entropy_backward(Tensor& dlogits, const Tensor& logits, const Tensor& lse, const Tensor& targets,
                                float dloss) override;
    void add_inplace(Tensor& a, const Tensor& b) override;
    void scale_inplace(Tensor& a, float s) override;
    double sum(const Tensor& x) override;
    double sum_squares(const Tensor& x) override;
    void adamw_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, float lr, float beta1, float beta2,
                      float eps, float weight_decay, int64_t step) override;
    void delay_compensate(Tensor& grad, const Tensor& w, const Tensor& stale, float lambda) override;
    void adamw_update_multi(const std::vector<AdamWParamRef>& params, float lr, float beta1, float beta2, float eps,
                            int64_t step) override;
    void lion_update(Tensor& param, const Tensor& grad, Tensor& m, float lr, float beta1, float beta2,
                     float weight_decay) override;
    void adan_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& m_diff, Tensor& n, Tensor& prev_grad,
                     const AdanScalars& s) override;
    void mars_correction(Tensor& c, const Tensor& grad, const Tensor& last_grad, float scale) override;
    void mars_update(Tensor& param, const Tensor& c, const Tensor& grad, Tensor& last_grad, Tensor& m, Tensor& v,
                     double c_norm, const MarsScalars& s) override;
    void muon_momentum(Tensor& update, const Tensor& grad, Tensor& momentum, float mu, bool nesterov) override;
    void newton_schulz(const std::vector<Tensor*>& outs, const std::vector<const Tensor*>& ins, int steps) override;
    void muon_apply(Tensor& param, const Tensor& ortho, float lr, float scale, float weight_decay) override;
    void matmul(Tensor& c, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, float alpha,
                float beta) override;
    void symmetric_eigenvectors_descending(Tensor& vectors, const Tensor& a) override;
    void qr_orthonormal(Tensor& q, const Tensor& a) override;
    void column_dots(Tensor& out, const Tensor& a, const Tensor& b) override;
    void index_select(Tensor& dst, const Tensor& src, int dim, const std::vector<int64_t>& index) override;
    void add_to_diagonal(Tensor& a, float s) override;
    void lerp_inplace(Tensor& a, const Tensor& b, float w) override;
    void add_scaled_inplace(Tensor& a, const Tensor& b, float alpha) override;
    void adam_direction(Tensor& direction, Tensor& m, Tensor& v, const Tensor& g, float beta1, float beta2,
                        float eps) override;

private:
    template <class F>
    auto timed(const char* name, F&& call);

    Ops& inner_;
    std::map<std::string, OpTime> times_;
};

}  // namespace nb

// The op interface: everything a layer or optimizer computes goes through here.
//
// One interface, two backends: `CpuOps` (src/cpu/, fp32, the deterministic reference) and, later, `CudaOps`
// (cuda/). Layer code never knows which backend it runs on.
//
// Conventions, shared by every backend:
// - Row-major tensors; a "row" is one token: N = batch * seq_len rows.
// - Linear weights are stored [out, in] (as torch.nn.Linear), so y = x W^T.
// - Every backward ACCUMULATES (+=) into every gradient it writes, activation gradients included; callers
//   zero buffers before the first contribution. One rule for all ops keeps residual and tied-weight
//   gradients simple, and makes a microbatch's weight gradients add onto the running sum in a fixed order.
// - Results are bitwise deterministic: same inputs, same bits, for any thread count.
// - Precision: a backend has an activation dtype (CPU: f32; CUDA: bf16). Activations, their gradients and the
//   compute copy of the weights are in it; statistics (rstd, lse, per-row loss), parameter gradients, master
//   weights and optimizer state are always f32. Each op below names which of its tensors are which.
//   Activations and layer code allocate through zeros() so they land on the backend's device and dtype.
#pragma once

#include "tensor.h"

namespace nb {

class Ops {
public:
    virtual ~Ops() = default;
    virtual Device device() const = 0;
    virtual DType activation_dtype() const = 0;

    // A zero-filled tensor on this backend's device: for gradients, which ops accumulate into.
    virtual Tensor zeros(const Shape& shape, DType dtype) = 0;
    // A tensor with undefined contents: for forward outputs, which ops overwrite entirely.
    virtual Tensor empty(const Shape& shape, DType dtype) = 0;
    Tensor activation(const Shape& shape) { return zeros(shape, activation_dtype()); }
    Tensor f32_zeros(const Shape& shape) { return zeros(shape, DType::f32); }
    Tensor output(const Shape& shape) { return empty(shape, activation_dtype()); }
    Tensor f32_output(const Shape& shape) { return empty(shape, DType::f32); }
    // dst = src converted to dst's dtype (f32 <-> activation dtype), same element count.
    virtual void cast(Tensor& dst, const Tensor& src) = 0;
    // A copy on this backend's device, issued like any other op (Tensor::clone on a device tensor waits for
    // the copy; this does not).
    Tensor copy_of(const Tensor& t) {
        Tensor c = empty(t.shape(), t.dtype());
        cast(c, t);
        return c;
    }
    // Waits until every op issued so far has finished (a no-op where ops run synchronously, as on the CPU).
    virtual void synchronize() {}

    // In every op: x, y, dx, dy, q, k, v, gate, up, logits and their gradients are activations; w, table and gain
    // are compute weights (activation dtype); dw, dtable, dgain are f32 parameter gradients; rstd, lse and loss
    // are f32; tokens and targets are i32.

    // ---- linear: y[N,out] = x[N,in] W[out,in]^T ----
    virtual void linear_forward(Tensor& y, const Tensor& x, const Tensor& w) = 0;
    // dx[N,in] += dy W ; dw[out,in] += dy^T x. Either output may be undefined (not wanted).
    virtual void linear_backward(Tensor& dx, Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& w) = 0;

    // ---- embedding: out[N,d] = table[tokens[n], :] ----
    virtual void embedding_forward(Tensor& out, const Tensor& tokens, const Tensor& table) = 0;
    // dtable[tokens[n], :] += dout[n, :], summed in row order (no atomics: deterministic).
    virtual void embedding_backward(Tensor& dtable, const Tensor& tokens, const Tensor& dout) = 0;

    // ---- RMSNorm over the last dim d: rstd[n] = 1/sqrt(mean_j x[n,j]^2 + eps); y = x * rstd * gain ----
    virtual void rmsnorm_forward(Tensor& y, Tensor& rstd, const Tensor& x, const Tensor& gain, float eps) = 0;
    // dx += rstd * (dy*gain - x * rstd^2 * mean_j(dy*gain*x)) ; dgain += sum_n dy * x * rstd
    virtual void rmsnorm_backward(Tensor& dx, Tensor& dgain, const Tensor& dy, const Tensor& x, const Tensor& gain,
                                  const Tensor& rstd) = 0;

    // ---- RoPE (rotate-half convention, as HF LLaMA) on x[N, heads, head_dim], position = n % seq_len ----
    // For i < head_dim/2, angle = pos * theta^(-2i/head_dim):
    //   out[i]          = x[i] cos - x[i+half] sin
    //   out[i+half]     = x[i+half] cos + x[i] sin
    virtual void rope_forward(Tensor& out, const Tensor& x, int64_t seq_len, float theta) = 0;
    // The rotation is orthogonal: din += rotate(dout, -angle).
    virtual void rope_backward(Tensor& din, const Tensor& dout, int64_t seq_len, float theta) = 0;

    // ---- causal grouped-query attention, scale 1/sqrt(head_dim) ----
    // q[B,T,H,hd], k/v[B,T,KV,hd] with H % KV == 0 (query head h reads kv head h / (H/KV)).
    // out[B,T,H,hd]; lse[B,H,T] = log-sum-exp of each row of scaled scores (what backward needs).
    virtual void attention_forward(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v) = 0;
    virtual void attention_backward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout, const Tensor& q,
                                    const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse) = 0;

    // ---- SwiGLU: out = silu(gate) * up, silu(z) = z / (1 + exp(-z)) ----
    virtual void swiglu_forward(Tensor& out, const Tensor& gate, const Tensor& up) = 0;
    virtual void swiglu_backward(Tensor& dgate, Tensor& dup, const Tensor& dout, const Tensor& gate,
                                 const Tensor& up) = 0;

    // ---- softmax cross-entropy per row: loss[n] = lse[n] - logits[n, target[n]] ----
    virtual void cross_entropy_forward(Tensor& loss, Tensor& lse, const Tensor& logits, const Tensor& targets) = 0;
    // dlogits += dloss * (softmax(logits) - onehot(target)) ; dloss is the same for every row (1/N for a mean).
    virtual void cross_entropy_backward(Tensor& dlogits, const Tensor& logits, const Tensor& lse,
                                        const Tensor& targets, float dloss) = 0;

    // ---- element-wise and reductions ----
    virtual void add_inplace(Tensor& a, const Tensor& b) = 0;  // a += b
    virtual void scale_inplace(Tensor& a, float s) = 0;        // a *= s
    // Sum of x (resp. x^2), accumulated in double in index order.
    virtual double sum(const Tensor& x) = 0;
    virtual double sum_squares(const Tensor& x) = 0;

    // ---- optimizer kernels ----
    // One AdamW step exactly as torch.optim.AdamW (decoupled decay, bias correction):
    //   p *= 1 - lr*wd ; m = b1 m + (1-b1) g ; v = b2 v + (1-b2) g^2
    //   p -= (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
    virtual void adamw_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, float lr, float beta1,
                              float beta2, float eps, float weight_decay, int64_t step) = 0;
    // DC-ASGD's first-order delay compensation (--delay-fix taylor), on f32 grad and master weights w and the
    // stale compute weights (activation dtype) the gradient was computed at:
    //   grad += ((lambda * grad) * grad) * (w - float(stale))       in that order, each operation rounded
    virtual void delay_compensate(Tensor& grad, const Tensor& w, const Tensor& stale, float lambda) = 0;
};

}  // namespace nb

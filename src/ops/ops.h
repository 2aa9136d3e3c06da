// The op interface: everything a layer or optimizer computes goes through here.
//
// One interface, two backends: `CpuOps` (src/cpu/, fp32, the deterministic reference) and `CudaOps` (cuda/).
// Layer code never knows which backend it runs on. The interface is cut where its users differ: `LayerOps` are
// what model/ computes, `OptimizerOps` what optim/ computes (the update rules and linear algebra on optimizer
// state), both over `OpsCore` (device, allocation, casts, element-wise updates and reductions, which both use);
// `Ops` is the whole of it, what a backend implements.
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

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "src/core/tensor.h"

namespace nb {

class OpProfiler;  // src/ops/op_profiler.h

// Memory a run may still allocate on a backend's device, and what the figure is, for the message that refuses a
// run which cannot fit (pipeline/stage/stage_memory.h): "22.8 GB" + " of host memory is available (MemAvailable)".
struct AvailableMemory {
    int64_t bytes = 0;
    std::string what;  // " of host memory is available (MemAvailable)", " is free on GPU 0 (cudaMemGetInfo)"
};

// What layers and optimizers both use.
class OpsCore {
public:
    virtual ~OpsCore() = default;
    virtual Device device() const = 0;
    virtual DType activation_dtype() const = 0;
    // What can still be allocated on device(), before a run allocates its stages; nullopt where it is not known.
    virtual std::optional<AvailableMemory> available_memory() const = 0;

    // A zero-filled tensor on this backend's device: for gradients, which ops accumulate into.
    Tensor zeros(const Shape& shape, DType dtype);  // src/ops/ops.cpp
    // A tensor with undefined contents: for forward outputs, which ops overwrite entirely.
    Tensor empty(const Shape& shape, DType dtype);
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

    // ---- element-wise and reductions ----
    virtual void add_inplace(Tensor& a, const Tensor& b) = 0;  // a += b
    virtual void scale_inplace(Tensor& a, float s) = 0;        // a *= s
    // Sum of x (resp. x^2), accumulated in double in index order.
    virtual double sum(const Tensor& x) = 0;
    virtual double sum_squares(const Tensor& x) = 0;

    // The profiler recording this backend's ops (src/ops/op_profiler.h), or null: none is attached.
    OpProfiler* profiler() const { return profiler_; }

private:
    friend class OpProfiler;
    OpProfiler* profiler_ = nullptr;
};

// The ops of the layers (model/).
class LayerOps : public virtual OpsCore {
public:
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
    // dx += rstd * (dy*gain - x * rstd^2 * mean_j(dy*gain*x)) ; dgain += sum_n dy * x * rstd. Either output may be
    // undefined (not wanted); each is computed the same way whether the other is or not (split backward).
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

    // ---- decoding with a KV cache (generation: model/kv_cache.h); no backward ----
    // RoPE as rope_forward, on one sequence's rows x[N, heads, head_dim] at positions first_position + n.
    virtual void rope_forward_at(Tensor& out, const Tensor& x, int64_t first_position, float theta) = 0;
    // Causal attention of Tq new queries over Tk >= Tq keys, the cache's and their own: q/out [B,Tq,H,hd], k/v
    // [B,Tk,KV,hd]; query i stands at position Tk - Tq + i and sees keys 0 .. Tk - Tq + i. Scale and grouping as
    // attention_forward; with Tq = Tk the same attention (its lse is not kept).
    virtual void attention_forward_cached(Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v) = 0;

    // ---- SwiGLU: out = silu(gate) * up, silu(z) = z / (1 + exp(-z)) ----
    virtual void swiglu_forward(Tensor& out, const Tensor& gate, const Tensor& up) = 0;
    virtual void swiglu_backward(Tensor& dgate, Tensor& dup, const Tensor& dout, const Tensor& gate,
                                 const Tensor& up) = 0;

    // ---- softmax cross-entropy per row: loss[n] = lse[n] - logits[n, target[n]] ----
    virtual void cross_entropy_forward(Tensor& loss, Tensor& lse, const Tensor& logits, const Tensor& targets) = 0;
    // dlogits += dloss * (softmax(logits) - onehot(target)) ; dloss is the same for every row (1/N for a mean).
    virtual void cross_entropy_backward(Tensor& dlogits, const Tensor& logits, const Tensor& lse,
                                        const Tensor& targets, float dloss) = 0;

    // ---- Mixture of Experts (docs/DESIGN.md section 7): E experts, top-k routing, dropless dispatch ----
    // N tokens, k slots per token, R = N k (token, slot) pairs. probs [N,E], topk_gate/dgate [N,k], dprobs [N,E]
    // and the aux loss [1] are f32; topk_expert [N,k], pair_of_row/row_of_pair [R] and expert_offsets [E+1] are
    // i32; expert_bias [E] is f32 state (not a parameter). A pair p = n k + j is token n's slot j; a "row" r is
    // its place in the permuted order, sorted by (expert, token index, slot): expert e's pairs are the rows
    // expert_offsets[e] .. expert_offsets[e+1], contiguous, so each expert runs one GEMM over them.

    // Router: probs = softmax(logits) per row (f32); each row's k experts are those with the largest
    // probs + expert_bias (ties go to the lower expert index), in that order (slot 0 the best); the bias only
    // selects: topk_gate[n,j] = probs[n, topk_expert[n,j]], divided by the sum of the row's k gates when renorm
    // (--moe-router-topk-renorm). expert_bias may be undefined (no bias).
    virtual void moe_router_forward(Tensor& probs, Tensor& topk_expert, Tensor& topk_gate, const Tensor& logits,
                                    const Tensor& expert_bias, bool renorm) = 0;
    // dp = dprobs + the gates' gradient (dp[e_j] += dgate_j, or (dgate_j - sum_l dgate_l gate_l) / S when renorm,
    // S = sum_l probs[e_l]); then the softmax: dlogits[i] += p[i] (dp[i] - sum_m p[m] dp[m]). dprobs may be
    // undefined (no aux-loss gradient). The selection is piecewise constant: it has no gradient.
    virtual void moe_router_backward(Tensor& dlogits, const Tensor& dprobs, const Tensor& dgate, const Tensor& probs,
                                     const Tensor& topk_expert, const Tensor& topk_gate, bool renorm) = 0;
    // Switch/GShard load-balancing loss: loss[0] = coeff E sum_i f_i P_i with f_i = (pairs routed to i) / R (from
    // expert_offsets; no gradient) and P_i = mean over the N tokens of probs[n,i]; summed in double, in index order.
    virtual void moe_aux_loss_forward(Tensor& loss, const Tensor& probs, const Tensor& expert_offsets,
                                      float coeff) = 0;
    // dprobs[n,i] += dloss coeff E f_i / N  (dloss = d objective / d loss).
    virtual void moe_aux_loss_backward(Tensor& dprobs, const Tensor& expert_offsets, float coeff, float dloss) = 0;
    // The dispatch plan of topk_expert: expert_offsets (a counting sort's prefix sums, expert_offsets[E] = R),
    // pair_of_row (the stable permutation: row r holds pair pair_of_row[r]) and row_of_pair (its inverse).
    virtual void moe_dispatch_plan(Tensor& pair_of_row, Tensor& row_of_pair, Tensor& expert_offsets,
                                   const Tensor& topk_expert) = 0;
    // Permute: xp[r, :] = x[pair_of_row[r] / k, :] (a token's row is copied once per slot), xp [R,d], x [N,d].
    virtual void moe_permute_forward(Tensor& xp, const Tensor& x, const Tensor& pair_of_row) = 0;
    // dx[n, :] += sum over j = 0..k-1 in slot order of dxp[row_of_pair[n k + j], :].
    virtual void moe_permute_backward(Tensor& dx, const Tensor& dxp, const Tensor& row_of_pair) = 0;
    // Grouped linear: y[r, :] = x[r, :] w[e]^T for the rows r of expert e; w holds E weights [out,in] (each
    // expert's own parameter), x [R,in], y [R,out]. One GEMM per expert with rows; an expert without rows is skipped.
    virtual void moe_grouped_linear_forward(Tensor& y, const Tensor& x, const std::vector<const Tensor*>& w,
                                            const Tensor& expert_offsets) = 0;
    // Per expert e over its rows: dx += dy w[e] ; dw[e] += dy^T x. dx may be undefined and dw empty (not wanted).
    virtual void moe_grouped_linear_backward(Tensor& dx, const std::vector<Tensor*>& dw, const Tensor& dy,
                                             const Tensor& x, const std::vector<const Tensor*>& w,
                                             const Tensor& expert_offsets) = 0;
    // Unpermute and combine: y[n, :] = sum over j = 0..k-1, in slot order, of topk_gate[n,j] expert_out[row, :]
    // with row = row_of_pair[n k + j]; y [N,d] is overwritten, expert_out [R,d].
    virtual void moe_combine_forward(Tensor& y, const Tensor& expert_out, const Tensor& topk_gate,
                                     const Tensor& row_of_pair) = 0;
    // dexpert_out[row, :] += topk_gate[n,j] dy[n, :] ; dgate[n,j] += sum_c dy[n,c] expert_out[row,c] (in c order).
    virtual void moe_combine_backward(Tensor& dexpert_out, Tensor& dgate, const Tensor& dy, const Tensor& expert_out,
                                      const Tensor& topk_gate, const Tensor& row_of_pair) = 0;
    // Expert bias (aux-loss-free balancing, DeepSeek-V3): expert_load [E] f32 += the pairs each expert received,
    // expert_offsets[e+1] - expert_offsets[e] (one microbatch's loads into the step's sum; exact up to 2^24).
    virtual void moe_expert_load_accumulate(Tensor& expert_load, const Tensor& expert_offsets) = 0;
    // Once per optimizer step: expert_bias[i] += rate sign(mean_load - expert_load[i]), in place, with mean_load =
    // sum(expert_load) / E (in double) and sign(0) = 0 (the bias stays). expert_bias and expert_load f32 [E].
    virtual void moe_expert_bias_update(Tensor& expert_bias, const Tensor& expert_load, float rate) = 0;
};

// The ops of the optimizers and delay mitigations (optim/): update rules, and linear algebra on optimizer state.
class OptimizerOps : public virtual OpsCore {
public:
    // ---- optimizer kernels ----
    // DC-ASGD's first-order delay compensation (--delay-fix taylor), on f32 grad and master weights w and the
    // stale compute weights (activation dtype) the gradient was computed at:
    //   grad += ((lambda * grad) * grad) * (w - float(stale))       in that order, each operation rounded
    virtual void delay_compensate(Tensor& grad, const Tensor& w, const Tensor& stale, float lambda) = 0;
    // The optimizers' arithmetic (optim/*.cpp keep the state and decide each parameter's hyperparameters).
    // Every tensor here is f32: master weights (param), parameter gradients (grad) and optimizer state; each op
    // works element by element in flat order unless it says otherwise. The f32 scalars are computed on the host
    // by shared code (src/ops/adamw_scalars.h, src/ops/optimizer_scalars.h), so both backends start from the same bits.
    // Every operation below is rounded on its own, in the order written; fma(a, b, c) = a*b + c rounded once.
    // Except newton_schulz, the CUDA results are the CPU's bit for bit.

    // ---- AdamW, exactly as torch.optim.AdamW (decoupled decay, bias correction), at step t from 1 ----
    //   p *= 1 - lr*wd ; m = b1 m + (1-b1) g ; v = b2 v + (1-b2) g^2
    //   p -= (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
    // One parameter of a fused AdamW step: its tensors and its own weight decay (0 for norm gains).
    struct AdamWParamRef {
        Tensor* param;
        const Tensor* grad;
        Tensor* m;
        Tensor* v;
        float weight_decay;
    };
    // One AdamW step of every entry (one lr, betas, eps and step; each entry's own weight decay); an entry's bits
    // do not depend on the others it came with. CUDA: one kernel launch for all of them (multi-tensor apply).
    virtual void adamw_update_multi(const std::vector<AdamWParamRef>& params, float lr, float beta1, float beta2,
                                    float eps, int64_t step) = 0;

    // ---- Lion (lucidrains/lion-pytorch), decay = 1 - lr*wd ----
    //   p = p * decay ;  p = p - lr * sign(fma(g, 1-b1, m*b1)) ;  m = fma(g, 1-b2, m*b2)
    // sign(0) = 0 (as torch.sign: a coordinate with no signal does not move); sign(NaN) = 0 as well.
    virtual void lion_update(Tensor& param, const Tensor& grad, Tensor& m, float lr, float beta1, float beta2,
                             float weight_decay) = 0;

    // ---- Adan (sail-sg/Adan, proximal decay), scalars from adan_scalars() (src/ops/optimizer_scalars.h) ----
    //   diff = first_step ? 0 : g - prev
    //   m = m*b1 + (1-b1)*g ;  m_diff = m_diff*b2 + (1-b2)*diff ;  u = g + b2*diff ;  n = n*b3 + ((1-b3)*u)*u
    //   denom = sqrt(n) / bc3_sqrt + eps
    //   p = p - (step_size*m) / denom ;  p = p - (step_size_diff*m_diff) / denom ;  p = p / shrink
    //   prev = g
    struct AdanScalars {
        float beta1, one_minus_beta1, beta2, one_minus_beta2, beta3, one_minus_beta3;
        float bc3_sqrt;        // sqrt(1 - b3^t)
        float step_size;       // lr / (1 - b1^t)
        float step_size_diff;  // lr * b2 / (1 - b2^t)
        float eps;
        float shrink;     // 1 + lr*wd: the proximal decay divides by it
        bool first_step;  // t == 1: there is no previous gradient, the difference is 0
    };
    virtual void adan_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& m_diff, Tensor& n,
                             Tensor& prev_grad, const AdanScalars& s) = 0;

    // ---- MARS-AdamW (AGI-Arena/MARS, approximate gradient difference), in two ops around ||c||_F ----
    // mars_correction: the variance-reduced gradient, scale = f32(gamma * b1 / (1 - b1)):
    //   c = (g - last)*scale + g
    // The optimizer then takes c_norm = sqrt(sum_squares(c)) in double and calls mars_update, scalars from
    // mars_scalars() (src/ops/optimizer_scalars.h):
    //   c' = c_norm > 1 ? f32(double(c) / c_norm) : c            per-tensor clipping, the division in double
    //   m = m*b1 + (1-b1)*c' ;  v = v*b2 + ((1-b2)*c')*c'
    //   denom = (sqrt(v)*inv_bc2_sqrt + eps)*bc1
    //   p = p + neg_lr*(p*wd + m/denom) ;  last = g
    virtual void mars_correction(Tensor& c, const Tensor& grad, const Tensor& last_grad, float scale) = 0;
    struct MarsScalars {
        float beta1, one_minus_beta1, beta2, one_minus_beta2;
        float bc1;           // 1 - b1^t
        float inv_bc2_sqrt;  // 1 / sqrt(1 - b2^t)
        float eps;
        float neg_lr;        // -lr
        float weight_decay;  // 0 for parameters without decay
    };
    virtual void mars_update(Tensor& param, const Tensor& c, const Tensor& grad, Tensor& last_grad, Tensor& m,
                             Tensor& v, double c_norm, const MarsScalars& s) = 0;

    // ---- Muon (KellerJordan/Muon) on a hidden matrix: momentum, orthogonalisation, update ----
    // muon_momentum, the momentum as a lerp and the direction to orthogonalise:
    //   buf = buf + (1-mu)*(g - buf) ;  update = nesterov ? g + mu*(buf - g) : buf      (update is its own tensor)
    virtual void muon_momentum(Tensor& update, const Tensor& grad, Tensor& momentum, float mu, bool nesterov) = 0;
    // newton_schulz: outs[i] = NewtonSchulz5(*ins[i]) for a BATCH of same-shaped [rows, cols] matrices (outs may
    // alias ins). X = G / (||G||_F + 1e-7) per matrix, transposed when rows > cols; `steps` times
    //   A = X X^T ;  B = b A + c A A ;  X = a X + B X          (a, b, c) = (3.4445, -4.7750, 2.0315)
    // then transposed back. CPU: f32 products (OpenBLAS), matrix by matrix. CUDA: batched bf16 GEMMs with f32
    // accumulation, as the reference implementation runs it: NOT the CPU's bits (about 1-2% relative Frobenius
    // difference), but each matrix's bits do not depend on the batch it came in.
    virtual void newton_schulz(const std::vector<Tensor*>& outs, const std::vector<const Tensor*>& ins,
                               int steps) = 0;
    // muon_apply, decoupled decay then the scaled orthogonal step (scale = sqrt(max(1, rows/cols))):
    //   p = p * (1 - lr*wd) ;  p = p - lr*(ortho*scale)
    virtual void muon_apply(Tensor& param, const Tensor& ortho, float lr, float scale, float weight_decay) = 0;
    // Linear algebra on f32 optimizer state (SOAP's preconditioners and eigenbases: optim/soap.cpp). Every tensor
    // here is f32 on the backend's device; a matrix is rank 2, row-major. The element-wise ops round each
    // operation on its own, in the order written, so the CUDA results are the CPU's bit for bit; the products and
    // factorizations are library calls (CPU: tiled OpenBLAS products and LAPACK, on one BLAS thread; CUDA:
    // cuBLAS in plain f32, never TF32, and cuSOLVER) and agree to f32 rounding, not bit for bit.

    // c[m,n] = alpha op(a) op(b) + beta c, op(x) = x^T when trans_x (a is [m,k] or [k,m], b [k,n] or [n,k]).
    // beta = 0 overwrites c without reading it. c must not share storage with a or b.
    virtual void matmul(Tensor& c, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, float alpha,
                        float beta) = 0;
    // The columns of vectors [n,n]: orthonormal eigenvectors of the symmetric a [n,n], column 0 belonging to the
    // largest eigenvalue (descending). Only a's lower triangle (a[i,j], i >= j) is read, as torch.linalg.eigh.
    // Signs are the solver's (they may differ between backends), and where eigenvalues repeat any orthonormal
    // basis of their space may come out. Single precision first; if it does not converge, double; if that fails
    // too, nb::RuntimeError naming both routines and their info codes.
    virtual void symmetric_eigenvectors_descending(Tensor& vectors, const Tensor& a) = 0;
    // q [n,n] = Q of the Householder QR decomposition a = Q R of the square a [n,n] (torch.linalg.qr's Q), up to
    // the signs of its columns: LAPACK and cuSOLVER may choose differently.
    virtual void qr_orthonormal(Tensor& q, const Tensor& a) = 0;
    // out[j] = sum_i a[i,j] * b[i,j] for a, b [m,n] and out [n] (diag(a^T b): Rayleigh quotients q_j . (A q_j)),
    // accumulated in f32 from 0 in increasing i.
    virtual void column_dots(Tensor& out, const Tensor& a, const Tensor& b) = 0;
    // dst = src.index_select(dim, index) on a matrix src [r,c]: dim 0: dst[i,j] = src[index[i], j] (dst
    // [index.size(), c]); dim 1: dst[i,j] = src[i, index[j]] (dst [r, index.size()]). The index is host data
    // (computed on the host, e.g. an argsort) and is range-checked there. dst must not share storage with src.
    virtual void index_select(Tensor& dst, const Tensor& src, int dim, const std::vector<int64_t>& index) = 0;
    // a[k,k] += s for a square matrix a.
    virtual void add_to_diagonal(Tensor& a, float s) = 0;
    // a = torch.lerp(a, b, w), both of its forms: |w| < 0.5 ? a + w*(b - a) : b - (b - a)*(1 - w).
    virtual void lerp_inplace(Tensor& a, const Tensor& b, float w) = 0;
    // a = a + alpha*b (b may be a itself: a = a + alpha*a, a decoupled weight decay).
    virtual void add_scaled_inplace(Tensor& a, const Tensor& b, float alpha) = 0;
    // Adam's moments and its direction without bias correction (SOAP runs it in the eigenbasis), with
    // c1 = f32(1 - double(beta1)) and c2 = f32(1 - double(beta2)):
    //   m = m*beta1 + c1*g ;  v = v*beta2 + c2*(g*g) ;  direction = m / (sqrt(v) + eps)
    virtual void adam_direction(Tensor& direction, Tensor& m, Tensor& v, const Tensor& g, float beta1, float beta2,
                                float eps) = 0;
};

// The whole interface: what a backend implements, and what model/ and optim/ take.
class Ops : public LayerOps, public OptimizerOps {};

}  // namespace nb

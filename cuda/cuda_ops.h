// CudaOps: the CUDA backend of the op interface (src/ops/ops.h). bf16 activations and compute weights, f32
// statistics, parameter gradients, master weights and optimizer state.
//
// Each op family lives in its own .cu file under cuda/ (linear.cu: cuBLASLt; attention.cu: the hand-written
// kernels, attention_cudnn.cu: cuDNN's fused attention; rmsnorm.cu; rope.cu; swiglu.cu; embedding.cu;
// cross_entropy.cu; elementwise.cu; the MoE ops: moe_*.cu; the optimizers: adamw_multi.cu, lion.cu, adan.cu,
// mars.cu, muon.cu, newton_schulz.cu (batched cuBLASLt), soap.cu, linalg.cu (cuBLAS f32 + cuSOLVER)), and the
// math of each kernel is written beside it. All kernels run on one stream (CudaContext::stream); host-side
// results (sum, sum_squares) and host-side shapes (the MoE grouped linear's expert offsets) synchronise it.
//
// Determinism: fixed launch shapes and fixed reduction orders, no floating-point atomics, so a run gives the
// same bits every time on the same GPU model (and cuDNN version: its attention backward is built in cuDNN's
// deterministic variant, cuda/attention_cudnn.cu).
#pragma once

#include <memory>

#include "src/ops/op_profiler.h"
#include "src/ops/ops.h"

namespace nb::cuda {

struct CudaContext;  // stream, cuBLASLt handle and workspace (cuda/context.cu)

class CudaOps final : public Ops {
public:
    CudaOps();
    ~CudaOps() override;

    Device device() const override { return Device::cuda; }
    DType activation_dtype() const override { return DType::bf16; }
    std::optional<AvailableMemory> available_memory() const override;  // cuda/available_memory.cu
    void cast(Tensor& dst, const Tensor& src) override;
    void synchronize() override;  // cuda/synchronize.cu

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

    // ---- MoE (src/ops/ops.h; docs/DESIGN.md section 7): cuda/moe_router.cu (router, top-k), moe_aux_loss.cu (aux
    // loss, expert bias update), moe_dispatch.cu (plan, permutation), moe_grouped_linear.cu (per-expert cuBLASLt
    // GEMMs), moe_combine.cu. probs, gates, the aux loss and the bias f32; the maps i32; the rest bf16 ----
    void moe_router_forward(Tensor& probs, Tensor& topk_expert, Tensor& topk_gate, const Tensor& logits,
                            const Tensor& expert_bias, bool renorm) override;
    void moe_router_backward(Tensor& dlogits, const Tensor& dprobs, const Tensor& dgate, const Tensor& probs,
                             const Tensor& topk_expert, const Tensor& topk_gate, bool renorm) override;
    void moe_aux_loss_forward(Tensor& loss, const Tensor& probs, const Tensor& expert_offsets, float coeff) override;
    void moe_aux_loss_backward(Tensor& dprobs, const Tensor& expert_offsets, float coeff, float dloss) override;
    void moe_dispatch_plan(Tensor& pair_of_row, Tensor& row_of_pair, Tensor& expert_offsets,
                           const Tensor& topk_expert) override;
    void moe_permute_forward(Tensor& xp, const Tensor& x, const Tensor& pair_of_row) override;
    void moe_permute_backward(Tensor& dx, const Tensor& dxp, const Tensor& row_of_pair) override;
    void moe_grouped_linear_forward(Tensor& y, const Tensor& x, const std::vector<const Tensor*>& w,
                                    const Tensor& expert_offsets) override;
    void moe_grouped_linear_backward(Tensor& dx, const std::vector<Tensor*>& dw, const Tensor& dy, const Tensor& x,
                                     const std::vector<const Tensor*>& w, const Tensor& expert_offsets) override;
    void moe_combine_forward(Tensor& y, const Tensor& expert_out, const Tensor& topk_gate,
                             const Tensor& row_of_pair) override;
    void moe_combine_backward(Tensor& dexpert_out, Tensor& dgate, const Tensor& dy, const Tensor& expert_out,
                              const Tensor& topk_gate, const Tensor& row_of_pair) override;
    void moe_expert_load_accumulate(Tensor& expert_load, const Tensor& expert_offsets) override;
    void moe_expert_bias_update(Tensor& expert_bias, const Tensor& expert_load, float rate) override;

    void add_inplace(Tensor& a, const Tensor& b) override;
    void scale_inplace(Tensor& a, float s) override;
    double sum(const Tensor& x) override;
    double sum_squares(const Tensor& x) override;

    void delay_compensate(Tensor& grad, const Tensor& w, const Tensor& stale, float lambda) override;
    // cuda/adamw_multi.cu, lion.cu, adan.cu, mars.cu, muon.cu, newton_schulz.cu
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

    CudaContext& context() { return *ctx_; }

private:
    std::unique_ptr<CudaContext> ctx_;
};

// Starts the backend on this process's GPU: RuntimeError naming the CUDA error when none is usable.
std::unique_ptr<Ops> make_cuda_ops();

// Bytes of GPU memory in use on the current device (total - free, from cudaMemGetInfo): with the caching
// allocator, which keeps what it allocated, this is the run's peak plus the CUDA context.
int64_t device_memory_used_bytes();

}  // namespace nb::cuda

// The override of every op in LayerOps and OptimizerOps (src/ops/ops.h), written once for both backends:
// CpuOps (src/cpu/cpu_ops.h) and CudaOps (cuda/cuda_ops.h) include this file inside their class bodies, so a new
// op's signature is written in ops.h and here, not once more per backend. `override` makes the compiler check each
// line against ops.h, and a backend that lacks a definition fails to link.
// No include guard on purpose: it is included once inside each backend's class, and a file may see both classes.
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

    void rope_forward_at(Tensor& out, const Tensor& x, int64_t first_position, float theta) override;
    void attention_forward_cached(Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v) override;

    void swiglu_forward(Tensor& out, const Tensor& gate, const Tensor& up) override;
    void swiglu_backward(Tensor& dgate, Tensor& dup, const Tensor& dout, const Tensor& gate,
                         const Tensor& up) override;

    void cross_entropy_forward(Tensor& loss, Tensor& lse, const Tensor& logits, const Tensor& targets) override;
    void cross_entropy_backward(Tensor& dlogits, const Tensor& logits, const Tensor& lse, const Tensor& targets,
                                float dloss) override;

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

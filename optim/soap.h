// SOAP: Shampoo's preconditioner eigenbasis, with Adam run inside it (Vyas et al. 2024, "SOAP: Improving and
// Stabilizing Shampoo using Adam"; the rule of the authors' reference soap.py, with merge_dims, precondition_1d
// and normalize_grads off and bias correction on).
//
// Per parameter p (a matrix [r, c] or a vector) with gradient G; beta_s = shampoo_beta, or beta2 when it is < 0.
// A matrix side n <= max_precond_dim gets a preconditioner GG_d [n, n] and its eigenbasis Q_d (columns ordered
// by descending eigenvalue); any other side, and every vector, gets none: Q_d = I there, so a vector's update is
// Adam's.  project(X) = Q_0^T X Q_1,  project_back(X) = Q_0 X Q_1^T.  lerp(a, b, w) = a + w (b - a).
//   first call:  GG_0 = (1 - beta_s) G G^T,  GG_1 = (1 - beta_s) G^T G,  Q_d = eigenvectors(GG_d + 1e-30 I).
//                No update (the reference skips it, so that the first gradient never meets its own basis); s = 0.
//   later calls: s <- s + 1
//                G' = project(G)
//                M  <- beta1 M + (1 - beta1) G'          M lives in the eigenbasis between steps
//                V  <- beta2 V + (1 - beta2) G'^2
//                p  <- p - lr sqrt(1 - beta2^s) / (1 - beta1^s) * project_back(M / (sqrt(V) + eps))
//                p  <- p - lr wd p                       after the update, on the updated p (wd = 0 for norm gains)
//                then the preconditioner follows G:
//                M  <- project_back(M)                   to the parameter's own coordinates, for the new basis
//                GG_0 <- lerp(GG_0, G G^T, 1 - beta_s),  GG_1 <- lerp(GG_1, G^T G, 1 - beta_s)
//                every precondition_frequency-th s, for d = 0 then 1, one power iteration refreshes Q_d:
//                    order = argsort(diag(Q_d^T GG_d Q_d), descending); V and Q_d's columns take that order
//                    along dim d; Q_d <- the Q of QR(GG_d Q_d)
//                M  <- project(M)
// The eigendecomposition runs once per parameter; afterwards the cheap QR keeps the basis tracking GG.
//
// All arithmetic goes through the op interface (src/ops/ops.h: matmul, symmetric_eigenvectors_descending,
// qr_orthonormal and the small kernels beside them), on f32 state kept on the optimizer's device beside the
// weights, so the same code runs on either backend. Only the refresh's argsort runs on the host, on the n
// Rayleigh quotients it downloads (every precondition_frequency-th step). The eigenvectors' signs are the
// solver's; the update does not depend on them (each Q appears once in project and once in project_back).
#pragma once

#include <array>

#include "optim/optimizer.h"

namespace nb {

struct SoapConfig {
    float beta1 = 0.95f;          // --beta1
    float beta2 = 0.95f;          // --beta2
    float shampoo_beta = -1.0f;   // --shampoo-beta; < 0: use beta2 (the reference's convention)
    float eps = 1e-8f;            // --eps
    float weight_decay = 0.01f;   // --weight-decay; only where ParamInfo::weight_decay() (never norm gains)
    int precondition_frequency = 10;   // --precondition-frequency: steps between eigenbasis refreshes
    int64_t max_precond_dim = 10000;   // sides longer than this get no preconditioner (the vocabulary, say)

    // std::logic_error unless betas in [0, 1) (shampoo_beta may also be < 0), eps > 0, weight_decay >= 0, all
    // finite, precondition_frequency >= 1 (the flags' ranges are the optimizer registry's to check, for the user).
    void validate() const;
    // The preconditioner's EMA coefficient that the rule uses: shampoo_beta, or beta2 when it is < 0.
    float effective_shampoo_beta() const { return shampoo_beta < 0.0f ? beta2 : shampoo_beta; }
};

class Soap final : public Optimizer {
public:
    // Allocates every state tensor (zeros, f32, on `device`) for `layout`, the eigenbases included, so the
    // pointers that state_tensors() returns are stable from here on. Validates `cfg`; std::logic_error for a
    // parameter of rank > 2.
    Soap(const ParamLayout& layout, const SoapConfig& cfg, Device device = Device::cpu);
    // The bytes of state the constructor allocates for `layout`, before it does (pipeline/stage/stage_memory.h).
    static int64_t state_bytes(const ParamLayout& layout, const SoapConfig& cfg);

    std::string name() const override { return "soap"; }
    // `ops` must be the backend of the state's device; weights and gradients are f32 tensors there. The first
    // call only builds the preconditioners.
    void step(Ops& ops, const ParamLayout& layout, TensorSet& weights, const TensorSet& grads, float lr) override;
    // Calls to step() so far, the skipped first one included: the reference's s is steps_taken() - 1.
    int64_t steps_taken() const override { return steps_taken_; }
    void restore_steps_taken(int64_t steps) override;
    // In this order, each group in layout order: "exp_avg.<param>" (stored as is: in the eigenbasis, see
    // exp_avg_original_space), "exp_avg_sq.<param>" (also in the eigenbasis), then for the parameters and
    // sides that have them "GG0.<param>", "GG1.<param>", "Q0.<param>", "Q1.<param>" (Q is zero before step 1).
    std::vector<std::pair<std::string, Tensor*>> state_tensors() override;

    const SoapConfig& config() const { return cfg_; }
    // Q_dim / GG_dim of parameter `param` (dim 0: rows, 1: columns), or nullptr where that side has none.
    const Tensor* eigenbasis(int param, int dim) const;
    const Tensor* preconditioner(int param, int dim) const;
    // The first moment in the parameter's own coordinates, project_back(M), computed by `ops` (a new tensor on
    // the state's device): free of the eigenvectors' arbitrary signs and order, so it compares directly with
    // another implementation's.
    Tensor exp_avg_original_space(Ops& ops, int param) const;

private:
    struct Slot {
        std::string name;
        int64_t rows = 0, cols = 0;          // a matrix's sides; a vector is [1, n] and has no bases
        Tensor m, v;                         // exp_avg (in the eigenbasis), exp_avg_sq
        std::array<Tensor, 2> gg, q;         // per side; undefined where the side has no preconditioner
    };

    void first_step(Ops& ops, Slot& slot, const Tensor& g);
    void update_step(Ops& ops, Slot& slot, const ParamInfo& info, Tensor& p, const Tensor& g, float lr, int64_t s);
    void update_preconditioner(Ops& ops, Slot& slot, const Tensor& g, int64_t s);
    // A new tensor shaped like x: project(x), or project_back(x) when `back`.
    Tensor project(Ops& ops, const Slot& slot, const Tensor& x, bool back) const;

    SoapConfig cfg_;
    Device device_;
    std::vector<Slot> slots_;
    int64_t steps_taken_ = 0;
};

}  // namespace nb

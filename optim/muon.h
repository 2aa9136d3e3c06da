// Muon (Jordan et al. 2024, "Muon: An optimizer for hidden layers"), as KellerJordan/Muon's
// SingleDeviceMuonWithAuxAdam: Muon for the hidden matrices, AdamW for everything else.
//
// A hidden matrix W [rows, cols] with gradient G and momentum buffer B (zeros at first), per step:
//   B <- B + (1 - mu) (G - B)                        momentum as a lerp (mu = --momentum)
//   U  = G + mu (B - G)  (Nesterov)  or  U = B       the direction to orthogonalize
//   O  = NewtonSchulz5(U)                            ~ the nearest semi-orthogonal matrix U V^T of U = U S V^T
//   W <- W (1 - lr wd) - lr sqrt(max(1, rows/cols)) O
// NewtonSchulz5 (Ops::newton_schulz) runs --ns-steps quintic iterations with (a, b, c) =
// (3.4445, -4.7750, 2.0315) on X = U / (||U||_F + 1e-7): in f32 on the CPU backend, in bf16 with f32
// accumulation on CUDA (as the reference does). The hidden matrices are grouped by shape and each group is
// orthogonalised in one batched call.
// The embedding, the head and the norm gains go to AdamW with their own lr (--adam-lr, scaled by the same
// schedule as --lr), betas (--adam-beta1/2) and eps (--adam-eps): the backend's fused AdamW kernel.
// The arithmetic is the backend's (Ops::muon_momentum, newton_schulz, muon_apply, adamw_update_multi).
// Defaults as published: lr 0.02, momentum 0.95, Nesterov, 5 steps, wd 0; AdamW lr 3e-4, (0.9, 0.95), 1e-10, wd 0.
#pragma once

#include "optim/adamw.h"
#include "optim/optimizer_state.h"

namespace nb {

struct MuonConfig {
    float momentum = 0.95f;
    bool nesterov = true;
    int ns_steps = 5;
    float weight_decay = 0.0f;
    AdamWConfig adam{0.9f, 0.95f, 1e-10f, 0.0f};  // for the parameters that are not hidden matrices
    float adam_lr_ratio = 3e-4f / 0.02f;          // their lr / the scheduled lr (--adam-lr / --lr)
};

class Muon final : public StatefulOptimizer {
public:
    Muon(const ParamLayout& layout, const MuonConfig& cfg, Device device);
    // The bytes of state the constructor allocates for `layout`, before it does (pipeline/stage/stage_memory.h).
    static int64_t state_bytes(const ParamLayout& layout, const MuonConfig& cfg);
    std::string name() const override { return "muon"; }
    void step(Ops& ops, const ParamLayout& layout, TensorSet& weights, const TensorSet& grads, float lr) override;
    // state_tensors(): "momentum_buffer.<hidden matrix>", then "exp_avg.<other>", then "exp_avg_sq.<other>",
    // each in layout order.

    // Only hidden matrices take Muon's update (the kind, ParamKind::hidden_matrix, decides).
    static bool takes_muon(const ParamInfo& info);
    // The hidden matrices grouped by shape, groups in order of first appearance, each in layout order: the
    // batches of Ops::newton_schulz in step().
    static std::vector<std::vector<int>> hidden_matrix_groups(const ParamLayout& layout);

private:
    void muon_update(Ops& ops, const ParamLayout& layout, const std::vector<int>& group, TensorSet& weights,
                     const TensorSet& grads, float lr);

    MuonConfig cfg_;
    int momentum_, exp_avg_, exp_avg_sq_;
};

}  // namespace nb

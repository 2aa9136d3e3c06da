// What the MoE feed-forwards tell about the microbatches they run (issue 12's observability: the aux loss apart
// from the LM loss, and each MoE layer's expert load).
//
// A block with an MoE (model/transformer_block.cpp) calls LayerContext::moe, when one is set, just before and just
// after its MoE's forward and backward; whoever runs the layers decides what that is for:
//   MoeLoadCounter (below)   counts the training forwards of one iteration: `train`'s loop (src/run/trainer.cpp),
//                            each pipeline stage (pipeline/stage/stage_runner.h, one counter per iteration, since under
//                            2bw/pipedream the forwards of iteration t+1 may run before t ends), the oracle
//                            (src/run/reference.cpp);
//   a stage's observer       also times each dispatch for --trace (pipeline/stage/stage_moe_observer.h).
// Evaluation forwards run with none, so they count nowhere. Nothing here changes what the layers compute.
#pragma once

#include <cstdint>
#include <vector>

#include "src/core/tensor.h"

namespace nb {

class MoeObserver {
public:
    virtual ~MoeObserver() = default;
    // Block `block`'s MoE begins its forward (backward = false) or its backward on the microbatch being run.
    virtual void dispatch_begins(int64_t block, bool backward) {}
    // ... and has ended it: the microbatch's expert offsets (i32 [E+1], on the backend's device) and, after a
    // forward, its aux loss (f32 [1], coefficient included; undefined after a backward).
    virtual void dispatch_ends(int64_t block, bool backward, const Tensor& expert_offsets, const Tensor& aux_loss) {}
};

// The (token, slot) pairs routed to each expert, from a microbatch's expert offsets (on any device).
std::vector<double> expert_tokens(const Tensor& expert_offsets);

// The figures of one load (tokens per expert): the most tokens an expert got over the mean (1: even; E/k when
// every token goes to the same k experts), and the fraction of experts that got none.
struct LoadFigures {
    double max_over_mean = 0;
    double idle_fraction = 0;
};
LoadFigures load_figures(const std::vector<double>& tokens_per_expert);

// One MoE block over the microbatches counted.
struct MoeBlockLoad {
    int64_t block = 0;
    double aux_loss_sum = 0;            // the microbatches' aux losses, added in microbatch order
    std::vector<double> expert_tokens;  // per expert, summed over the microbatches (integers, exact in doubles)
    bool operator==(const MoeBlockLoad&) const = default;
};

// Data parallelism: another replica's loads of the same blocks onto `total` (aux losses and tokens added), as
// replica 0's stage and the oracle both merge them, in replica order. std::logic_error if the blocks differ.
void add_replica_loads(std::vector<MoeBlockLoad>& total, const std::vector<MoeBlockLoad>& replica);

class MoeLoadCounter final : public MoeObserver {
public:
    // Counts forwards only (a backward sees the same routing again).
    void dispatch_ends(int64_t block, bool backward, const Tensor& expert_offsets, const Tensor& aux_loss) override;
    // In block order.
    const std::vector<MoeBlockLoad>& blocks() const { return blocks_; }

private:
    std::vector<MoeBlockLoad> blocks_;
};

}  // namespace nb

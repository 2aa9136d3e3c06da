// StageOptimizer: everything that updates one stage's weights, and the state it keeps for that: the optimizer
// of --optimizer (optim/make_optimizer.h) and the mitigation of --delay-fix (optim/delay_fix.h). The single-
// process trainer, the oracle (`nobubble reference`) and every pipeline stage step through this one type, so the
// update rule is written once.
//
// Buffers (model/params.h: the MoE expert bias) are not the optimizer's: the optimizer and the delay fix are built
// over the trainable parameters only (trainable_params(layout); for a model without buffers exactly its layout,
// so the state's names, order and hashes are those of the layout) and run on views of the master and gradients.
// After the optimizer's update, each expert bias takes its own rule from the loads in its gradient slot:
// b_i += rate sign(mean_load - load_i) (Ops::moe_expert_bias_update; docs/DESIGN.md section 7).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "model/params.h"
#include "optim/delay_fix.h"
#include "optim/optimizer.h"
#include "optim/optimizer_config.h"

namespace nb {

class StageOptimizer {
public:
    // `peak_lr`: --lr (see make_optimizer). `expert_bias_update_rate`: --moe-router-bias-update-rate (read only
    // when `layout` holds an expert bias). nb::UsageError for a bad configuration.
    StageOptimizer(const OptimizerConfig& optimizer, const DelayFixConfig& delay_fix, const ParamLayout& layout,
                   double peak_lr, Device device, double expert_bias_update_rate);

    // One step of `master` at learning rate `lr` (DelayFix::step: `asynchronous` and `stale` say how stale the
    // gradient is), then the expert biases' update. `layout` is the one given to the constructor; `grads` are the
    // step's averaged, clipped gradients (taylor compensates them in place) and, in a buffer's slot, its loads.
    void step(Ops& ops, const ParamLayout& layout, TensorSet& master, TensorSet& grads, float lr, bool asynchronous,
              const TensorSet* stale);
    // The two halves of that step: DelayFix::compensate, and DelayFix::update followed by the expert biases'.
    void compensate(Ops& ops, const ParamLayout& layout, const TensorSet& master, TensorSet& grads,
                    const TensorSet* stale);
    void update(Ops& ops, const ParamLayout& layout, TensorSet& master, TensorSet& grads, float lr, bool asynchronous);
    // A synchronous step: the plain update.
    void step(Ops& ops, const ParamLayout& layout, TensorSet& master, TensorSet& grads, float lr) {
        step(ops, layout, master, grads, lr, false, nullptr);
    }

    // --delay-fix predict: `out` (the compute weights of a predicted version, apart from `master`'s storage)
    // becomes W_hat = W - (lambda k) u_last on the trainable parameters, k = `updates_ahead` (DelayFix::
    // predict_weights); a buffer's slot is left as it is (it shares the master's tensor). std::logic_error
    // without predict.
    bool predicts() const { return delay_fix_.predicts(); }
    void predict_weights(Ops& ops, const ParamLayout& layout, const TensorSet& master, TensorSet& out,
                         int64_t updates_ahead) const;

    // The optimizer's state tensors, then the delay fix's, in their canonical order (what is hashed and saved).
    std::vector<std::pair<std::string, Tensor*>> state_tensors();
    std::vector<Tensor> state_in_order();

    int64_t steps_taken() const { return optimizer_->steps_taken(); }
    void restore_steps_taken(int64_t steps) { optimizer_->restore_steps_taken(steps); }

private:
    TrainableParams trainable_;  // what the optimizer and the delay fix see
    std::unique_ptr<Optimizer> optimizer_;
    DelayFix delay_fix_;
    float expert_bias_update_rate_;

    TensorSet trainable_view(const ParamLayout& layout, const TensorSet& set) const;
    void update_expert_biases(Ops& ops, const ParamLayout& layout, TensorSet& master, const TensorSet& grads) const;
};

// The bytes of that state (the optimizer's and the delay fix's, over the trainable parameters), without allocating it: the up-front memory check
// (pipeline/stage/stage_memory.h). `optimizer` validated.
int64_t stage_optimizer_state_bytes(const OptimizerConfig& optimizer, const DelayFixConfig& delay_fix,
                                    const ParamLayout& layout);

// The shapes of the state a stage of `layout` keeps (StageOptimizer::state_in_order), known before that stage's
// state exists: stage 0 posts its receives of the other stages' final state with them. Builds the optimizer on
// the host to read them off (cheap at the sizes the pipeline runs on the CPU).
std::vector<Shape> stage_optimizer_state_shapes(const OptimizerConfig& optimizer, const DelayFixConfig& delay_fix,
                                                const ParamLayout& layout, double peak_lr);
// The same with their names (the distributed optimizer's canonical order of the whole state).
std::vector<std::pair<std::string, Shape>> stage_optimizer_state_entries(const OptimizerConfig& optimizer,
                                                                         const DelayFixConfig& delay_fix,
                                                                         const ParamLayout& layout, double peak_lr);

}  // namespace nb

// StageOptimizer: everything that updates one stage's weights, and the state it keeps for that: the optimizer
// of --optimizer (optim/make_optimizer.h) and the mitigation of --delay-fix (optim/delay_fix.h). The single-
// process trainer, the oracle (`nobubble reference`) and every pipeline stage step through this one type, so the
// update rule is written once.
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
    // `peak_lr`: --lr (see make_optimizer). nb::UsageError for a bad configuration.
    StageOptimizer(const OptimizerConfig& optimizer, const DelayFixConfig& delay_fix, const ParamLayout& layout,
                   double peak_lr, Device device);

    // One step of `master` at learning rate `lr` (DelayFix::step: `asynchronous` and `stale` say how stale the
    // gradient is). `grads` are the step's averaged, clipped gradients (taylor compensates them in place).
    void step(Ops& ops, const ParamLayout& layout, TensorSet& master, TensorSet& grads, float lr, bool asynchronous,
              const TensorSet* stale);
    // The two halves of that step (DelayFix::compensate and DelayFix::update).
    void compensate(Ops& ops, const ParamLayout& layout, const TensorSet& master, TensorSet& grads,
                    const TensorSet* stale) {
        delay_fix_.compensate(ops, layout, master, grads, stale);
    }
    void update(Ops& ops, const ParamLayout& layout, TensorSet& master, TensorSet& grads, float lr, bool asynchronous) {
        delay_fix_.update(ops, *optimizer_, layout, master, grads, lr, asynchronous);
    }
    // A synchronous step: the plain update.
    void step(Ops& ops, const ParamLayout& layout, TensorSet& master, TensorSet& grads, float lr) {
        step(ops, layout, master, grads, lr, false, nullptr);
    }

    // The optimizer's state tensors, then the delay fix's, in their canonical order (what is hashed and saved).
    std::vector<std::pair<std::string, Tensor*>> state_tensors();
    std::vector<Tensor> state_in_order();

    int64_t steps_taken() const { return optimizer_->steps_taken(); }
    void restore_steps_taken(int64_t steps) { optimizer_->restore_steps_taken(steps); }

private:
    std::unique_ptr<Optimizer> optimizer_;
    DelayFix delay_fix_;
};

// The bytes of that state (the optimizer's and the delay fix's), without allocating it: the up-front memory check
// (pipeline/stage_memory.h). `optimizer` validated.
int64_t stage_optimizer_state_bytes(const OptimizerConfig& optimizer, const DelayFixConfig& delay_fix,
                                    const ParamLayout& layout);

// The shapes of the state a stage of `layout` keeps (StageOptimizer::state_in_order), known before that stage's
// state exists: stage 0 posts its receives of the other stages' final state with them. Builds the optimizer on
// the host to read them off (cheap at the sizes the pipeline runs on the CPU).
std::vector<Shape> stage_optimizer_state_shapes(const OptimizerConfig& optimizer, const DelayFixConfig& delay_fix,
                                                const ParamLayout& layout, double peak_lr);

}  // namespace nb

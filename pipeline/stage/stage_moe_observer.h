// StageMoeObserver: what a stage's MoE blocks tell while its runner (pipeline/stage/stage_runner.h) runs one microbatch's
// forward or backward (model/moe_load.h). A training forward's routing is counted into the counter of the
// microbatch's iteration (the stage keeps one per iteration: under 2bw and pipedream the forwards of iteration t+1
// may run before t is reported); with --trace every dispatch, forward and backward, is also a span of the
// enclosing F or B ("moe L3 F5", pipeline/stage/stage_clock.h) with the block and that microbatch's expert load.
#pragma once

#include <cstdint>

#include "model/moe_load.h"
#include "pipeline/stage/stage_meter.h"

namespace nb {

class StageMoeObserver final : public MoeObserver {
public:
    // `count_into`: the iteration's counter for a forward, null for a backward.
    StageMoeObserver(StageMeter& meter, MoeLoadCounter* count_into, int64_t microbatch, int64_t version);

    void dispatch_begins(int64_t block, bool backward) override;
    void dispatch_ends(int64_t block, bool backward, const Tensor& expert_offsets, const Tensor& aux_loss) override;

private:
    StageMeter& meter_;
    MoeLoadCounter* count_into_;
    int64_t microbatch_, version_;
    int64_t start_ns_ = 0;  // of the dispatch now running
};

}  // namespace nb

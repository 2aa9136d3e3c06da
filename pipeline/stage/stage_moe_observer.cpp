#include "pipeline/stage/stage_moe_observer.h"

namespace nb {

StageMoeObserver::StageMoeObserver(StageMeter& meter, MoeLoadCounter* count_into, int64_t microbatch, int64_t version)
    : meter_(meter), count_into_(count_into), microbatch_(microbatch), version_(version) {}

void StageMoeObserver::dispatch_begins(int64_t block, bool backward) {
    if (meter_.keeps_records()) start_ns_ = meter_.now_ns();
}

void StageMoeObserver::dispatch_ends(int64_t block, bool backward, const Tensor& expert_offsets,
                                     const Tensor& aux_loss) {
    if (count_into_ && !backward) count_into_->dispatch_ends(block, backward, expert_offsets, aux_loss);
    if (!meter_.keeps_records()) return;
    TimedTask span{backward ? TaskKind::moe_backward : TaskKind::moe_forward, microbatch_, version_, start_ns_};
    span.block = block;
    const LoadFigures load = load_figures(expert_tokens(expert_offsets));
    span.load_max_over_mean = load.max_over_mean;
    span.idle_fraction = load.idle_fraction;
    meter_.span_ran(span);
}

}  // namespace nb

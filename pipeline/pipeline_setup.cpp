#include "pipeline/pipeline_setup.h"

#include <fmt/format.h>

#include "src/core/error.h"
#include "model/partition.h"

namespace nb {

namespace {

void check_fault_flags(const TrainOptions& o) {
    if ((o.fail_at_step >= 0) != (o.fail_rank >= 0))
        throw UsageError("--fail-at-step and --fail-rank go together (test-only fault injection)");
    if (o.fail_rank >= o.stages)
        throw UsageError(fmt::format("--fail-rank {} is not a rank of {} stages", o.fail_rank, o.stages));
}

}  // namespace

PipelineSetup make_pipeline_setup(const TrainOptions& o) {
    PipelineSetup setup;
    setup.options = o;
    setup.spec.kind = parse_schedule_kind(o.schedule);
    setup.spec.stages = o.stages;
    setup.spec.microbatches = o.num_microbatches;
    setup.spec.steps = o.train_iters;
    setup.spec.sync_start = o.sync_start;
    setup.spec.sync_cooldown = o.sync_cooldown;
    o.validate_counting_steps(setup.spec.kind == ScheduleKind::pipedream);  // the flags first: --data, shapes, lr...
    if (o.stages < 1) throw UsageError(fmt::format("--stages must be positive, got {}", o.stages));
    setup.cut = partition_model(o.model, o.stages);  // more stages than layers
    setup.spec.validate();                           // 2bw with m < P
    o.validate_clip_scope_and_ties(is_asynchronous(setup.spec.kind));
    o.validate_delay_mitigations(setup.spec.optimizer_steps());
    check_fault_flags(o);
    setup.plans = build_schedule(setup.spec);
    for (const StageSpec& spec : setup.cut) setup.layouts.push_back(StageModel(o.model, spec).layout());
    return setup;
}

std::vector<int64_t> PipelineSetup::param_tensor_counts() const {
    std::vector<int64_t> counts;
    for (const ParamLayout& layout : layouts) counts.push_back(layout.size());
    return counts;
}

void check_stages_match_ranks(const TrainOptions& o, int world_size) {
    if (world_size > 1 && o.stages != world_size)
        throw UsageError(
            fmt::format("--stages {} does not match the {} MPI ranks: under mpirun each rank is one "
                        "stage (omit --stages, or start {} ranks)",
                        o.stages, world_size, o.stages));
}

bool needs_pipeline(const TrainOptions& o, int world_size) {
    const bool injects_faults = o.fail_at_step >= 0 || o.fail_rank >= 0;  // only the executor injects them
    const bool traces = !o.trace_path.empty();  // only the executor records a trace (one stage: the same bits)
    return world_size > 1 || o.stages != 1 || injects_faults || traces ||
           is_asynchronous(parse_schedule_kind(o.schedule));
}

}  // namespace nb

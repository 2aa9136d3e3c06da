#include "pipeline/schedule/pipeline_setup.h"

#include <algorithm>

#include <fmt/format.h>

#include "src/core/error.h"

namespace nb {

PipelineSetup make_pipeline_setup(const RunPlan& plan, int64_t first_iteration) {
    PipelineSetup setup;
    setup.options = plan.options;
    setup.spec = plan.schedule;
    setup.cut = plan.cut;
    setup.spec.validate();
    setup.first_iteration = first_iteration;
    setup.end_iteration = end_iteration(plan.options, first_iteration);
    for (const StageSpec& spec : setup.cut) setup.layouts.push_back(StageModel(plan.options.model, spec).layout());
    return setup;
}

std::unique_ptr<ActionSource> PipelineSetup::stage_actions(int stage) const {
    if (auto fixed = fixed_plans.find(stage); fixed != fixed_plans.end())
        return std::make_unique<ListedActions>(fixed->second);
    const StagePlacement placement = spec.placement();
    return std::make_unique<ScheduleActions>(spec, placement.rank_of(stage), first_step(), end_step(),
                                             placement.chunk_of(stage));
}

std::unique_ptr<ActionSource> PipelineSetup::rank_actions(int rank) const {
    return std::make_unique<ScheduleActions>(spec, rank, first_step(), end_step());
}

VersionUses PipelineSetup::version_uses(int stage, bool optimizer_reads_stale) const {
    VersionUses uses(spec, rank_of_stage(stage), first_step(), optimizer_reads_stale);
    if (auto fixed = fixed_plans.find(stage); fixed != fixed_plans.end()) uses.count_from(fixed->second);
    return uses;
}

StagePlan PipelineSetup::stage_plan(int stage) const { return drain(*stage_actions(stage)); }

bool PipelineSetup::saves_after(int64_t iteration) const {
    return checkpoint_due(options, iteration + 1, end_iteration);
}

std::vector<int64_t> PipelineSetup::param_tensor_counts() const {
    std::vector<int64_t> counts;
    for (const ParamLayout& layout : layouts) counts.push_back(layout.size());
    return counts;
}

void check_stages_match_ranks(const TrainOptions& o, int world_size) {
    const int replicas = o.data_parallel_size;
    if (replicas > 1 && world_size != o.stages * replicas)
        throw UsageError(fmt::format("--data-parallel-size {} with --stages {} needs {} MPI ranks (stages x replicas: "
                                     "mpirun -np {}), not {}",
                                     replicas, o.stages, o.stages * replicas, o.stages * replicas, world_size));
    if (replicas == 1 && world_size > 1 && o.stages != world_size)
        throw UsageError(
            fmt::format("--stages {} does not match the {} MPI ranks: under mpirun each rank is one "
                        "stage (omit --stages, or start {} ranks)",
                        o.stages, world_size, o.stages));
    if (world_size > 1 && o.schedule_spec().chunks_per_rank() > 1 && o.device == Device::cuda)
        throw UsageError(fmt::format("--schedule {} with {} chunks per stage under mpirun runs on the CPU backend "
                                     "only: the NCCL links join neighbouring ranks, and chunks also talk from the "
                                     "last rank to the first, or to their own rank",
                                     schedule_kind_name(o.schedule), o.schedule_spec().chunks_per_rank()));
    if (world_size <= 1 && o.stall_rank >= 0)
        throw UsageError("--stall-at-step stalls one rank of an mpirun job; in one process it would stall every "
                         "stage forever");
}

bool needs_pipeline(const RunPlan& plan, int world_size) {
    const TrainOptions& o = plan.options;
    // Only the executor injects faults and stalls.
    const bool injects_faults = o.fail_at_step >= 0 || o.fail_rank >= 0 || o.stall_at_step >= 0 || o.stall_rank >= 0 ||
                                o.kill_rank >= 0;
    const bool traces = !o.trace_path.empty();  // only the executor records a trace (one stage: the same bits)
    return world_size > 1 || o.stages != 1 || o.data_parallel_size > 1 || o.schedule_spec().chunks_per_rank() != 1 || injects_faults || traces ||
           is_asynchronous(o.schedule);
}

}  // namespace nb

#include "pipeline/stage/stage_memory.h"

#include <algorithm>

#include <fmt/format.h>

#include "optim/optimizer_shards.h"
#include "optim/stage_optimizer.h"
#include "src/core/byte_size.h"
#include "src/core/error.h"

namespace nb {

StageMemory& StageMemory::operator+=(const StageMemory& other) {
    weights_bytes += other.weights_bytes;
    versions_bytes += other.versions_bytes;
    gradients_bytes += other.gradients_bytes;
    optimizer_bytes += other.optimizer_bytes;
    activations_bytes += other.activations_bytes;
    return *this;
}

StageMemory estimate_stage_memory(const TrainOptions& o, const StageSpec& spec, const ParamLayout& layout,
                                  const StageLoad& load, DType activation_dtype) {
    const int64_t params = layout.total_numel();
    const auto f32_bytes = static_cast<int64_t>(dtype_bytes(DType::f32));
    const auto compute_bytes = static_cast<int64_t>(dtype_bytes(activation_dtype));
    // In f32 the compute weights are the master itself (model/params.h make_compute_weights): no copy.
    const int64_t compute_copy = activation_dtype == DType::f32 ? 0 : compute_bytes * params;
    const MicrobatchStashBytes one =
        microbatch_stash_bytes(o.model, spec, o.micro_batch_size, o.seq_length, o.recompute);
    // The backward's peak starts at what the microbatch kept, so with no actions: n - 1 kept, one backward.
    const int64_t stash_f32_bytes = load.actions.empty()
                                        ? (load.microbatches_in_flight - 1) * one.kept + one.backward_peak
                                        : peak_stash_bytes(load.actions, one);
    StageMemory m;
    m.weights_bytes = f32_bytes * params + compute_copy;
    m.versions_bytes = (load.versions_held - 1) * compute_bytes * params;
    // --delay-fix predict or lookahead: the newest version's prediction, a compute copy beside the weights (its
    // last update is optimizer state; checkpoints save the master, not this copy).
    if (o.delay_fix.predicts()) m.weights_bytes += compute_bytes * params;
    m.gradients_bytes = f32_bytes * params;
    // A stage holding both ends of a tied matrix keeps the head's half of its gradient in a slot of its own.
    if (o.model.tie_embeddings && spec.has_embedding && spec.has_head)
        m.gradients_bytes += f32_bytes * shape_numel(layout[0].shape);
    // The distributed optimizer: the most any replica owns (optim/optimizer_shards.h).
    if (o.distributed_optimizer) {
        const std::vector<int64_t> shares =
            optimizer_shard_bytes(o.optimizer, o.delay_fix, layout, o.data_parallel_size);
        m.optimizer_bytes = *std::max_element(shares.begin(), shares.end());
    } else {
        m.optimizer_bytes = stage_optimizer_state_bytes(o.optimizer, o.delay_fix, layout);
    }
    m.activations_bytes = stash_f32_bytes / f32_bytes * compute_bytes;
    return m;
}

StageMemory estimate_stage_memory(const PipelineSetup& setup, int stage, DType activation_dtype) {
    // The whole run's peaks (a resumed run's part of it holds no more), from a short run of the same shape.
    // (part_peaks' counts, read off the same lists that the activation walk takes: the schedule built once.)
    const std::vector<StagePlan> plans = representative_part_plans(setup.spec);
    const auto s = static_cast<size_t>(stage);
    const StageLoad load{max_versions_held(plans, stage), max_in_flight(plans, stage), plans.at(s)};
    return estimate_stage_memory(setup.options, setup.cut.at(s), setup.layouts.at(s), load, activation_dtype);
}

StageMemory estimate_rank_memory(const PipelineSetup& setup, int rank, DType activation_dtype) {
    StageMemory need;
    for (int c = 0; c < setup.chunks_per_rank(); ++c)
        need += estimate_stage_memory(setup, setup.stage_of_chunk(rank, c), activation_dtype);
    return need;
}

StageMemory estimate_cut_memory(const TrainOptions& options, const std::vector<StageSpec>& cut,
                                DType activation_dtype) {
    StageMemory sum;
    for (const StageSpec& spec : cut)  // a StageModel builds the layout only: no weights yet
        sum += estimate_stage_memory(options, spec, StageModel(options.model, spec).layout(), StageLoad{},
                                     activation_dtype);
    return sum;
}

namespace {

// A stage's checkpoint file: the master weights are f32 whatever the backend computes in.
int64_t stage_checkpoint_bytes(const StageMemory& m, const ParamLayout& layout) {
    return static_cast<int64_t>(dtype_bytes(DType::f32)) * layout.total_numel() + m.versions_bytes +
           m.optimizer_bytes;
}

}  // namespace

int64_t estimate_checkpoint_bytes(const PipelineSetup& setup, DType activation_dtype) {
    int64_t bytes = 0;
    for (int s = 0; s < setup.num_stages(); ++s)
        bytes += stage_checkpoint_bytes(estimate_stage_memory(setup, s, activation_dtype),
                                        setup.layouts.at(static_cast<size_t>(s)));
    return bytes;
}

int64_t estimate_checkpoint_bytes(const TrainOptions& options, const std::vector<StageSpec>& cut,
                                  DType activation_dtype) {
    int64_t bytes = 0;
    for (const StageSpec& spec : cut) {
        const ParamLayout layout = StageModel(options.model, spec).layout();
        bytes += stage_checkpoint_bytes(estimate_stage_memory(options, spec, layout, StageLoad{}, activation_dtype),
                                        layout);
    }
    return bytes;
}

std::string describe_stage_memory(const StageMemory& m) {
    return fmt::format("{} (weights {}, weight versions {}, gradients {}, optimizer state {}, activations {})",
                       format_bytes(m.total_bytes()), format_bytes(m.weights_bytes), format_bytes(m.versions_bytes),
                       format_bytes(m.gradients_bytes), format_bytes(m.optimizer_bytes),
                       format_bytes(m.activations_bytes));
}

void require_memory_fits(int first_stage, int num_stages, const StageMemory& need,
                         const std::optional<AvailableMemory>& available) {
    if (!available || need.total_bytes() <= available->bytes) return;
    const std::string who = num_stages == 1
                                ? fmt::format("stage {} needs", first_stage)
                                : fmt::format("stages {}-{} need", first_stage, first_stage + num_stages - 1);
    throw UsageError(fmt::format("{} {} but {}{}", who, describe_stage_memory(need),
                                 format_bytes(available->bytes), available->what));
}

}  // namespace nb

#include "src/run/cut_memory.h"

#include <exception>
#include <limits>
#include <memory>
#include <optional>

#include "pipeline/schedule/schedule.h"
#include "pipeline/stage/stage_memory.h"
#include "src/core/mpi_env.h"
#include "src/run/backend.h"

namespace nb {

namespace {

// One piece of a stage (a block, the embedding, the head) as estimate_stage_memory counts it: what does not depend
// on the schedule (weights, gradients, optimizer state), one older weight version, one microbatch's stash.
struct PieceMemory {
    int64_t fixed = 0, per_version = 0, per_microbatch = 0;

    int64_t bytes(const StageLoad& load) const {
        return fixed + (load.versions_held - 1) * per_version + load.microbatches_in_flight * per_microbatch;
    }
};

// The stash counted per microbatch in flight is what one keeps until its backward (model/stash_bytes.h): a
// backward's rerun and the W halves of zero-bubble schedules are left to the memory check itself, which walks the
// actions (this bound is linear; the check has the last word).
PieceMemory piece_memory(const TrainOptions& o, const StageSpec& spec, DType dtype) {
    const ParamLayout layout = StageModel(o.model, spec).layout();
    const StageMemory two = estimate_stage_memory(o, spec, layout, StageLoad{2, 2}, dtype);
    const StageMemory one = estimate_stage_memory(o, spec, layout, StageLoad{2, 1}, dtype);
    return {two.weights_bytes + two.gradients_bytes + two.optimizer_bytes, two.versions_bytes,
            two.activations_bytes - one.activations_bytes};
}

}  // namespace

StageFits stage_memory_fits(const TrainOptions& o, const AvailableMemory& budget, DType dtype) {
    const int64_t L = o.model.num_layers;
    // A block's memory depends on whether it is an MoE block, not on where it is (its names aside).
    const int64_t first_dense = [&] {
        for (int64_t i = 0; i < L; ++i)
            if (!o.model.is_moe_block(i)) return i;
        return int64_t{-1};
    }();
    const int64_t first_moe = [&] {
        for (int64_t i = 0; i < L; ++i)
            if (o.model.is_moe_block(i)) return i;
        return int64_t{-1};
    }();
    const PieceMemory dense = first_dense >= 0 ? piece_memory(o, {first_dense, first_dense + 1, false, false}, dtype)
                                               : PieceMemory{};
    const PieceMemory moe = first_moe >= 0 ? piece_memory(o, {first_moe, first_moe + 1, false, false}, dtype)
                                           : PieceMemory{};
    const PieceMemory embedding = piece_memory(o, {0, 0, true, false}, dtype);
    const PieceMemory head = piece_memory(o, {L, L, false, true}, dtype);
    // prefix[i]: blocks 0..i-1, each part apart.
    auto prefix = std::make_shared<std::vector<PieceMemory>>(static_cast<size_t>(L) + 1);
    for (int64_t i = 0; i < L; ++i) {
        const PieceMemory& b = o.model.is_moe_block(i) ? moe : dense;
        const PieceMemory& before = (*prefix)[static_cast<size_t>(i)];
        (*prefix)[static_cast<size_t>(i) + 1] = {before.fixed + b.fixed, before.per_version + b.per_version,
                                                 before.per_microbatch + b.per_microbatch};
    }
    // Per part: with chunks per rank each chunk is a part of its own, with its own load (the memory check adds a
    // rank's parts up).
    const ScheduleSpec spec = o.schedule_spec();
    std::vector<StageLoad> loads;
    for (const PartPeaks& peaks : part_peaks(spec)) loads.push_back({peaks.versions_held, peaks.in_flight});
    const int last = spec.virtual_stage_count() - 1;
    // A rank holds V parts: each within 1/V of the budget, so that the rank fits whichever parts it is given.
    const int64_t limit = budget.bytes / spec.chunks_per_rank();
    return [prefix, loads, embedding, head, last, limit](int s, int64_t first, int64_t end) {
        const PieceMemory& a = (*prefix)[static_cast<size_t>(first)];
        const PieceMemory& b = (*prefix)[static_cast<size_t>(end)];
        const StageLoad& load = loads.at(static_cast<size_t>(s));
        int64_t need = PieceMemory{b.fixed - a.fixed, b.per_version - a.per_version,
                                   b.per_microbatch - a.per_microbatch}.bytes(load);
        if (s == 0) need += embedding.bytes(load);
        if (s == last) need += head.bytes(load);
        return need <= limit;  // require_memory_fits refuses more than the available bytes
    };
}

StageFits run_memory_fits(const TrainOptions& o) {
    auto bound = std::make_shared<std::optional<StageFits>>();  // filled at the first question
    return [o, bound](int s, int64_t first, int64_t end) {
        if (!*bound) {
            // A backend that cannot start (no GPU here) gives no bound: the run's own set-up reports it, agreed by
            // every rank, and every rank still takes part in the minimum below (none may wait there alone).
            std::optional<AvailableMemory> available;
            DType dtype = DType::f32;
            try {
                std::unique_ptr<Ops> ops = make_ops(o.device);
                available = ops->available_memory();
                dtype = ops->activation_dtype();
            } catch (const std::exception&) {
                available.reset();
            }
            constexpr long long kUnknown = std::numeric_limits<long long>::max();
            const long long least = mpi_min_over_ranks(available ? available->bytes : kUnknown);
            *bound = least == kUnknown ? StageFits{}
                                       : stage_memory_fits(o, {least, available ? available->what : ""}, dtype);
        }
        return !**bound || (**bound)(s, first, end);
    };
}

}  // namespace nb

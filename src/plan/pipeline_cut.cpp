#include "src/plan/pipeline_cut.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "src/plan/rank_balance.h"

namespace nb {

StageCut choose_pipeline_cut(const TrainOptions& o, const StageFits& fits) {
    const int parts = o.schedule_spec().virtual_stage_count();  // with chunks, one part per chunk of each stage
    if (!o.pipeline_layout.empty()) {
        std::vector<StageSpec> stages = partition_model_by_layout(o.model, parts, o.pipeline_layout);
        return {stages, std::vector<StageBound>(stages.size(), StageBound::layout), true};
    }
    switch (o.pipeline_cut) {
        case PipelineCut::params: {
            std::vector<StageSpec> stages = partition_model(o.model, parts);
            return {stages, std::vector<StageBound>(stages.size(), StageBound::params), true};
        }
        case PipelineCut::cost: {
            StageCut cut = partition_model_by_cost(o.model, parts, o.seq_length, fits);
            // With chunks the slowest rank sets the pace, not the slowest part (src/plan/rank_balance.h).
            cut.stages = balance_ranks(o.model, o.seq_length, o.schedule_spec().placement(), cut.stages,
                                       cut.fits_memory ? fits : StageFits{});
            return cut;
        }
    }
    throw std::logic_error("choose_pipeline_cut: unknown --pipeline-cut");
}

std::string describe_cut_choice(const TrainOptions& o) {
    if (!o.pipeline_layout.empty()) return fmt::format("--pipeline-layout {}", fmt::join(o.pipeline_layout, ","));
    return std::string(pipeline_cut_name(o.pipeline_cut));
}

}  // namespace nb

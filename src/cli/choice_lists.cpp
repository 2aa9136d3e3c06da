#include "src/cli/choice_lists.h"

#include <functional>

#include "cuda/attention_cudnn.h"
#include "model/config.h"
#include "model/partition.h"
#include "model/recompute.h"
#include "optim/delay_fix.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer_registry.h"
#include "src/core/name_table.h"
#include "src/core/tensor.h"
#include "src/plan/schedule_spec.h"
#include "src/plan/train_options.h"

namespace nb::cli {

namespace {

struct ChoiceList {
    std::string_view kind;  // --list KIND
    std::function<std::vector<std::string>()> names;
};

template <typename Strings>
std::vector<std::string> strings_of(const Strings& names) {
    return std::vector<std::string>(names.begin(), names.end());
}

template <const auto& table>
std::vector<std::string> table_names() {
    return strings_of(table.names());
}

const std::vector<ChoiceList>& choice_lists() {
    static const std::vector<ChoiceList> lists = {
        {"optimizers", [] { return strings_of(optimizer_names()); }},
        {"schedules", table_names<kScheduleKinds>},
        {"delay-fixes", table_names<kDelayFixKinds>},
        {"lr-decay-styles", table_names<kLrDecayStyles>},
        {"clip-scopes", table_names<kClipScopes>},
        {"pipeline-cuts", table_names<kPipelineCuts>},
        {"recompute-granularities", table_names<kRecomputeGranularities>},
        {"recompute-methods", table_names<kRecomputeMethods>},
        {"devices", table_names<kDevices>},
        {"models", model_preset_names},
        {"kill-points", table_names<kKillPoints>},
        {"attention-backends", table_names<cuda::kAttentionImpls>},  // NOBUBBLE_CUDA_ATTENTION's values
    };
    return lists;
}

}  // namespace

std::vector<std::string_view> choice_kinds() {
    std::vector<std::string_view> kinds;
    for (const ChoiceList& list : choice_lists()) kinds.push_back(list.kind);
    return kinds;
}

std::vector<std::string> choice_names(std::string_view kind) {
    for (const ChoiceList& list : choice_lists())
        if (list.kind == kind) return list.names();
    throw unknown_name_error("--list", kind, choice_kinds());
}

}  // namespace nb::cli

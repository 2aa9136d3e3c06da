// --pipeline-cut and --pipeline-layout: how a run cuts the model into stages (model/partition.h,
// src/plan/pipeline_cut.h).
#include "model/partition.h"
#include "src/cli/commands.h"

namespace nb::cli {

void add_cut_flags(CLI::App& app, CutFlags& f) {
    app.add_option("--pipeline-cut", f.cut,
                   "What the stage cut balances: " + kPipelineCuts.choices_text() +
                       " (cost: the FLOP model's forward + backward time, not a measured profile)")
        ->capture_default_str();
    app.add_option_function<std::string>(
           "--pipeline-layout",
           [&f](const std::string& layout) {
               f.layout = layout;
               f.layout_given = true;
           },
           "Blocks per stage, e.g. 3,4,4,2 (one count per stage, adding up to the layers); overrides --pipeline-cut")
        ->type_name("TEXT");
}

void resolve_cut_flags(const CutFlags& f, TrainOptions& o) {
    o.pipeline_cut = parse_pipeline_cut(f.cut);
    o.pipeline_layout = f.layout_given ? parse_pipeline_layout(f.layout) : std::vector<int64_t>{};
}

}  // namespace nb::cli

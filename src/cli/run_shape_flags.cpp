// The run's shape as flags, declared here once for every command that takes them: the batch and pipeline counts
// (RunShape, src/plan/run_shape.h; their ranges are check_run_shape's) and the stage cut, --pipeline-cut and
// --pipeline-layout (model/partition.h, src/plan/pipeline_cut.h). The model's flags are model_flags.cpp's.
#include "model/partition.h"
#include "src/cli/commands.h"

namespace nb::cli {

namespace {

// A count's flag: its name and its help (the value goes to the count's field of RunShape: add_shape_flag).
struct ShapeFlagSpec {
    const char* name;
    const char* help;
};

ShapeFlagSpec spec_of(ShapeFlag flag) {
    switch (flag) {
        case ShapeFlag::micro_batch_size: return {"--micro-batch-size", "Sequences per microbatch (B)"};
        case ShapeFlag::num_microbatches: return {"--num-microbatches", "Microbatches per iteration (m)"};
        case ShapeFlag::seq_length: return {"--seq-length", "Tokens per sequence (T)"};
        case ShapeFlag::stages: return {"--stages", "Pipeline stages (P)"};
        case ShapeFlag::data_parallel_size: return {"--data-parallel-size", "Pipeline replicas (D)"};
        case ShapeFlag::virtual_stages:
            return {"--virtual-stages", "Model chunks per stage (V, Megatron's virtual pipeline stages)"};
    }
    return {"?", "?"};
}

template <typename Count>
CLI::Option* add_count(CLI::App& app, const std::string& names, Count& count, const std::string& help) {
    return app.add_option(names, count, help)->capture_default_str();
}

}  // namespace

CLI::Option* add_shape_flag(CLI::App& app, RunShape& shape, const ShapeFlagUse& use) {
    const ShapeFlagSpec spec = spec_of(use.flag);
    const std::string names = use.aliases.empty() ? spec.name : use.aliases + "," + spec.name;
    const std::string help = use.note.empty() ? spec.help : std::string(spec.help) + ": " + use.note;
    switch (use.flag) {
        case ShapeFlag::micro_batch_size: return add_count(app, names, shape.micro_batch_size, help);
        case ShapeFlag::num_microbatches: return add_count(app, names, shape.num_microbatches, help);
        case ShapeFlag::seq_length: return add_count(app, names, shape.seq_length, help);
        case ShapeFlag::stages: return add_count(app, names, shape.stages, help);
        case ShapeFlag::data_parallel_size: return add_count(app, names, shape.data_parallel_size, help);
        case ShapeFlag::virtual_stages: return add_count(app, names, shape.virtual_stages, help);
    }
    return nullptr;
}

void add_shape_flags(CLI::App& app, RunShape& shape, std::initializer_list<ShapeFlagUse> uses) {
    for (const ShapeFlagUse& use : uses) add_shape_flag(app, shape, use);
}

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

#include "src/run/checkpoint.h"

#include <utility>
#include <vector>

#include <fmt/format.h>

#include "optim/optimizer_registry.h"
#include "pipeline/stage_checkpoint.h"
#include "src/core/checkpoint_dir.h"
#include "src/core/error.h"
#include "src/core/metrics_writer.h"

namespace nb {

namespace {

constexpr const char* kStageFile = "stage_0.bin";

using Identity = std::vector<std::pair<std::string, std::string>>;

Identity identity_of(const RunPlan& plan) {
    const TrainOptions& o = plan.options;
    const ModelConfig& m = o.model;
    Identity id = {
        {"model.vocab_size", fmt::format("{}", m.vocab_size)},
        {"model.hidden_size", fmt::format("{}", m.hidden_size)},
        {"model.ffn_hidden_size", fmt::format("{}", m.ffn_hidden_size)},
        {"model.num_layers", fmt::format("{}", m.num_layers)},
        {"model.num_heads", fmt::format("{}", m.num_heads)},
        {"model.num_kv_heads", fmt::format("{}", m.num_kv_heads)},
        {"model.rope_theta", fmt::format("{}", m.rope_theta)},
        {"model.norm_eps", fmt::format("{}", m.norm_eps)},
        {"model.tie_embeddings", fmt::format("{}", m.tie_embeddings)},
        {"update_rule", o.describe_update_rule()},
        {"taylor_lambda", fmt::format("{}", o.delay_fix.taylor_lambda)},
        {"schedule", std::string(schedule_kind_name(o.schedule))},
        {"stages", fmt::format("{}", o.stages)},
        {"micro_batch_size", fmt::format("{}", o.micro_batch_size)},
        {"num_microbatches", fmt::format("{}", o.num_microbatches)},
        {"seq_length", fmt::format("{}", o.seq_length)},
        {"seed", fmt::format("{}", o.seed)},
        {"data", o.data_path},
        {"val_data", o.val_data_path},
        {"val_fraction", fmt::format("{}", o.val_fraction)},
    };
    const OptimizerConfig resolved = with_defaults(o.optimizer);
    for (const OptimizerFlag& flag : optimizer_flags())
        if (const auto value = flag_value(resolved, flag)) id.emplace_back(std::string(flag.name), value_text(*value));
    return id;
}

std::string run_json(const RunPlan& plan, const StageState& stage, const LoaderPosition& data) {
    std::string id;
    for (const auto& [key, value] : identity_of(plan))
        id += fmt::format("{}\n      {}: {}", id.empty() ? "" : ",", json_quote(key), json_quote(value));
    return fmt::format("{{\n    \"identity\": {{{}\n    }},\n    \"steps_taken\": [{}],\n    \"data\": {{\"epoch\": {}, "
                       "\"index\": {}}}\n  }}",
                       id, stage.optimizer.steps_taken(), data.epoch, data.index);
}

// The saved identity against this run's: the first field that differs, with both values.
void check_identity(const JsonValue::Object& saved, const RunPlan& plan, const std::string& source) {
    for (const auto& [key, value] : identity_of(plan)) {
        const std::string& was = json_field(saved, key, source).string(source, key);
        if (was != value)
            throw RuntimeError(fmt::format("'{}': field 'identity.{}' is '{}' there, '{}' in this run: resuming would "
                                           "not continue the saved run",
                                           source, key, was, value));
    }
}

}  // namespace

void refuse_checkpoint_flags(const TrainOptions& o, const char* where) {
    if (!o.save_dir.empty() || !o.load_path.empty() || o.exit_interval > 0)
        throw UsageError(fmt::format("--save, --load and --exit-interval are not built yet for {}; the single-process "
                                     "loop (one stage, gpipe or 1f1b, no mpirun, no --trace) has them",
                                     where));
}

void save_checkpoint(const RunPlan& plan, int64_t step, StageState& stage, const LoaderPosition& data,
                     std::FILE* log) {
    const TrainOptions& o = plan.options;
    const std::string dir = make_step_dir(o.save_dir, step);
    const CheckpointEntry entry = write_checkpoint_file(dir, kStageFile, stage_state_pieces(stage).pieces());
    write_manifest(dir, step, {entry}, run_json(plan, stage, data));
    if (o.save_keep > 0) prune_checkpoints(o.save_dir, o.save_keep);
    fmt::print(log, "saved checkpoint {} ({} bytes)\n", dir, entry.bytes);
    std::fflush(log);
}

Resumed load_checkpoint(const RunPlan& plan, StageState& stage, std::FILE* log) {
    const LoadedCheckpoint c = read_checkpoint(find_checkpoint(plan.options.load_path));
    const std::string source = c.step_dir + "/manifest.json";
    const auto& run = c.run.object(source, "run");
    check_identity(json_field(run, "identity", source).object(source, "identity"), plan, source);
    const auto& steps = json_field(run, "steps_taken", source).array(source, "steps_taken");
    if (steps.size() != 1)
        throw RuntimeError(fmt::format("'{}': field 'steps_taken' has {} stages, this run 1", source, steps.size()));
    const auto& data = json_field(run, "data", source).object(source, "data");
    const Resumed r{c.step, {static_cast<uint64_t>(json_field(data, "epoch", source).int64(source, "epoch")),
                             static_cast<uint64_t>(json_field(data, "index", source).int64(source, "index"))}};
    const auto it = c.files.find(kStageFile);
    if (it == c.files.end()) throw RuntimeError(fmt::format("'{}': lists no {}", source, kStageFile));
    const std::string file = c.step_dir + "/" + kStageFile;
    const std::vector<std::vector<NamedTensor>> files{decode_named_tensors(it->second, file)};
    restore_stage_state(stage, tensors_by_name(files, file), steps[0].int64(source, "steps_taken"), file);
    fmt::print(log, "resumed from {} (after step {})\n", c.step_dir, c.step);
    return r;
}

}  // namespace nb

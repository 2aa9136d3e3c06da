#include "src/run/checkpoint.h"

#include <algorithm>
#include <set>
#include <utility>

#include <fmt/format.h>

#include "model/partition.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer_registry.h"
#include "src/core/error.h"
#include "src/core/metrics_writer.h"
#include "src/core/stop_signal.h"
#include "src/core/version.h"
#include "pipeline/stage/stage_checkpoint.h"

namespace nb {

namespace {

using Identity = std::vector<std::pair<std::string, std::string>>;

Identity identity_of(const TrainOptions& o) {
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
        {"model.moe", m.describe_moe()},
        {"update_rule", o.describe_update_rule()},
        {"taylor_lambda", fmt::format("{}", o.delay_fix.taylor_lambda)},
        {"schedule", std::string(schedule_kind_name(o.schedule))},
        {"micro_batch_size", fmt::format("{}", o.micro_batch_size)},
        {"seq_length", fmt::format("{}", o.seq_length)},
        {"seed", fmt::format("{}", o.seed)},
        {"data", o.data_path},
        {"val_data", o.val_data_path},
        {"val_fraction", fmt::format("{}", o.val_fraction)},
    };
    // The batch. Synchronous schedules: only the global batch, D x m, so that a run may resume at another D (each
    // step sees the same microbatches; only the order of the replicas' sum changes). Asynchronous ones step on each
    // replica's microbatches (pipedream) or keep versions per step of m (2bw): m and D both.
    if (is_asynchronous(o.schedule)) {
        id.emplace_back("num_microbatches", fmt::format("{}", o.num_microbatches));
        id.emplace_back("data_parallel_size", fmt::format("{}", o.data_parallel_size));
    } else {
        id.emplace_back("microbatches_per_iteration", fmt::format("{}", o.microbatches_per_iter()));
    }
    // The LR schedule as it runs (defaults resolved against the optimizer steps): a resume under another one would
    // not continue the saved run (Megatron refuses it too, unless told to override).
    const int64_t steps = ScheduleSpec{o.schedule, o.stages, o.num_microbatches, o.train_iters}.optimizer_steps();
    const LrScheduleConfig lr = LrSchedule(o.lr, steps).config();
    id.emplace_back("lr_schedule", fmt::format("{} lr {} min_lr {} warmup {} decay {} wsd_decay {}",
                                               lr_decay_style_name(lr.decay_style), lr.lr, lr.min_lr, lr.warmup_iters,
                                               lr.decay_iters, lr.wsd_decay_iters));
    const OptimizerConfig resolved = with_defaults(o.optimizer);
    for (const OptimizerFlag& flag : optimizer_flags())
        if (const auto value = flag_value(resolved, flag)) id.emplace_back(std::string(flag.name), value_text(*value));
    return id;
}

template <class T, class Format>
std::string json_list(const std::vector<T>& items, Format&& format) {
    std::string out;
    for (const T& item : items) out += fmt::format("{}{}", out.empty() ? "" : ", ", format(item));
    return "[" + out + "]";
}

std::string run_json(const TrainOptions& options, const SavedRun& saved) {
    std::string id;
    for (const auto& [key, value] : identity_of(options))
        id += fmt::format("{}\n      {}: {}", id.empty() ? "" : ",", json_quote(key), json_quote(value));
    const std::string cut = json_list(saved.cut, [](const StageSpec& s) {
        return fmt::format("{{\"first_block\": {}, \"end_block\": {}, \"embedding\": {}, \"head\": {}}}", s.first_block,
                           s.end_block, s.has_embedding, s.has_head);
    });
    const std::string steps = json_list(saved.steps_taken, [](int64_t n) { return fmt::format("{}", n); });
    return fmt::format(
        "{{\n    \"program\": {},\n    \"identity\": {{{}\n    }},\n    \"stages\": {},\n    \"cut\": {},\n"
        "    \"steps_taken\": {},\n    \"data\": {{\"epoch\": {}, \"index\": {}}},\n"
        "    \"rng\": {{\"seed\": {}, \"data_order_epoch\": {}}},\n    \"elapsed_s\": {:.6f}\n  }}",
        json_quote(kProgramVersion), id, saved.cut.size(), cut, steps, saved.data.epoch, saved.data.index,
        options.seed, saved.data.epoch, saved.elapsed_s);
}

// The saved identity against this run's: the first field that differs, with both values.
void check_identity(const JsonValue::Object& saved, const TrainOptions& options, const std::string& source) {
    for (const auto& [key, value] : identity_of(options)) {
        const std::string& was = json_field(saved, key, source).string(source, key);
        if (was != value)
            throw RuntimeError(fmt::format("'{}': field 'identity.{}' is '{}' there, '{}' in this run: resuming would "
                                           "not continue the saved run",
                                           source, key, was, value));
    }
}

int64_t int_field(const JsonValue::Object& o, const char* key, const std::string& source) {
    return json_field(o, key, source).int64(source, key);
}

std::vector<StageSpec> read_cut(const JsonValue::Object& run, const std::string& source) {
    std::vector<StageSpec> cut;
    for (const JsonValue& v : json_field(run, "cut", source).array(source, "cut")) {
        const auto& s = v.object(source, "cut[]");
        cut.push_back({int_field(s, "first_block", source), int_field(s, "end_block", source),
                       json_field(s, "embedding", source).boolean(source, "embedding"),
                       json_field(s, "head", source).boolean(source, "head")});
    }
    return cut;
}

SavedRun read_saved_run(const LoadedCheckpoint& c, const std::string& source) {
    const auto& run = c.run.object(source, "run");
    SavedRun saved;
    saved.step = c.step;
    saved.cut = read_cut(run, source);
    for (const JsonValue& v : json_field(run, "steps_taken", source).array(source, "steps_taken"))
        saved.steps_taken.push_back(v.int64(source, "steps_taken"));
    const auto& data = json_field(run, "data", source).object(source, "data");
    saved.data = {static_cast<uint64_t>(int_field(data, "epoch", source)),
                  static_cast<uint64_t>(int_field(data, "index", source))};
    // The run's clock: absent from checkpoints written before it was kept (they restart it at 0).
    if (const auto it = run.find("elapsed_s"); it != run.end())
        saved.elapsed_s = it->second.number(source, "elapsed_s");
    const int64_t stages = int_field(run, "stages", source);
    if (saved.cut.empty() || static_cast<int64_t>(saved.cut.size()) != stages ||
        saved.steps_taken.size() != saved.cut.size())
        throw RuntimeError(fmt::format("'{}': fields 'stages', 'cut' and 'steps_taken' do not agree ({} stages, {} "
                                       "cuts, {} step counts)",
                                       source, stages, saved.cut.size(), saved.steps_taken.size()));
    return saved;
}

// pipedream's stage s holds p - s versions: its state has no meaning for another p, nor for a block that the
// run's cut puts on another stage.
void check_stage_count(const TrainOptions& options, const SavedRun& saved, const std::vector<StageSpec>& cut,
                       const std::string& source) {
    if (options.schedule != ScheduleKind::pipedream) return;
    const auto stages = static_cast<size_t>(options.stages);
    if (saved.cut.size() != stages)
        throw RuntimeError(fmt::format("'{}': field 'stages' is {} there, {} in this run: pipedream's weight stash "
                                       "depends on the stage, so its checkpoint loads only into {} stages",
                                       source, saved.cut.size(), stages, saved.cut.size()));
    if (pipeline_layout_of(saved.cut) != pipeline_layout_of(cut))
        throw RuntimeError(fmt::format("'{}': field 'cut' is {} there, {} in this run: pipedream's weight stash "
                                       "depends on the stage, so its checkpoint loads only into the same cut "
                                       "(--pipeline-layout {})",
                                       source, describe_cut(saved.cut), describe_cut(cut),
                                       pipeline_layout_of(saved.cut)));
}

bool overlaps(const StageSpec& a, const StageSpec& b) {
    return std::max(a.first_block, b.first_block) < std::min(a.end_block, b.end_block) ||
           (a.has_embedding && b.has_embedding) || (a.has_head && b.has_head);
}

}  // namespace

std::optional<SaveDirLock> claim_save_dir(const TrainOptions& options,
                                          const std::function<int64_t()>& checkpoint_bytes) {
    if (options.save_dir.empty()) return std::nullopt;
    return SaveDirLock::claim(options.save_dir, checkpoint_bytes());
}

void complete_checkpoint(const TrainOptions& options, const std::string& step_dir, const std::vector<CheckpointEntry>& entries,
                         const SavedRun& saved, std::FILE* log) {
    write_manifest(step_dir, saved.step, entries, run_json(options, saved));
    if (options.save_keep > 0) prune_checkpoints(options.save_dir, options.save_keep);
    int64_t bytes = 0;
    for (const CheckpointEntry& e : entries) bytes += e.bytes;
    fmt::print(log, "saved checkpoint {} ({} bytes)\n", step_dir, bytes);
    std::fflush(log);
}

ResumePoint read_resume_point(const TrainOptions& options, const std::vector<StageSpec>& cut) {
    const std::set<std::string> none;
    const LoadedCheckpoint c = read_checkpoint(find_checkpoint(options.load_path), &none);
    const std::string source = c.step_dir + "/manifest.json";
    const auto& run = c.run.object(source, "run");
    check_identity(json_field(run, "identity", source).object(source, "identity"), options, source);
    ResumePoint r{c.step_dir, read_saved_run(c, source)};
    check_stage_count(options, r.saved, cut, source);
    if (r.saved.step < 0 || r.saved.step > options.train_iters)
        throw RuntimeError(fmt::format("'{}': field 'step' is {}, outside this run's {} iterations", source,
                                       r.saved.step, options.train_iters));
    return r;
}

StageFiles read_stage_files(const ResumePoint& resume, const StageSpec& stage) {
    const std::string manifest = resume.step_dir + "/manifest.json";
    std::set<std::string> wanted;
    std::set<int64_t> steps;
    for (size_t s = 0; s < resume.saved.cut.size(); ++s)
        if (overlaps(resume.saved.cut[s], stage)) {
            wanted.insert(stage_file_name(static_cast<int>(s)));
            steps.insert(resume.saved.steps_taken[s]);
        }
    if (steps.size() != 1)
        throw RuntimeError(fmt::format("'{}': the saved stages holding blocks {}-{} have {} different step counts",
                                       manifest, stage.first_block, stage.end_block, steps.size()));
    const LoadedCheckpoint c = read_checkpoint(resume.step_dir, &wanted);
    StageFiles out;
    out.steps_taken = *steps.begin();
    for (const std::string& name : wanted) {
        const std::string file = resume.step_dir + "/" + name;
        const auto it = c.files.find(name);
        if (it == c.files.end()) throw RuntimeError(fmt::format("'{}': lists no {}", manifest, name));
        out.files.push_back(decode_named_tensors(it->second, file));
        out.source += (out.source.empty() ? "" : ", ") + file;
    }
    out.by_name = tensors_by_name(out.files, out.source);
    return out;
}

void save_one_stage(const TrainOptions& options, int64_t step, double elapsed_s, StageState& stage,
                    const LoaderPosition& data, std::FILE* log) {
    const std::string dir = make_step_dir(options.save_dir, step);
    const CheckpointEntry entry = write_checkpoint_file(dir, stage_file_name(0), stage_state_pieces(stage).pieces());
    complete_checkpoint(options, dir, {entry},
                        {step, {stage.model.spec()}, {stage.optimizer.steps_taken()}, data, elapsed_s}, log);
}

ResumePoint load_one_stage(const TrainOptions& options, StageState& stage, std::FILE* log) {
    ResumePoint resume = read_resume_point(options, {stage.model.spec()});
    const StageFiles files = read_stage_files(resume, stage.model.spec());
    restore_stage_state(stage, files.by_name, files.steps_taken, files.source);
    print_resumed(resume, 1, log);
    return resume;
}

void print_resumed(const ResumePoint& resume, int stages, std::FILE* log) {
    const size_t saved = resume.saved.cut.size();
    if (saved == static_cast<size_t>(stages))
        fmt::print(log, "resumed from {} (after step {})\n", resume.step_dir, resume.saved.step);
    else
        fmt::print(log, "resumed from {} (after step {}), resharded from {} to {} stages\n", resume.step_dir,
                   resume.saved.step, saved, stages);
    std::fflush(log);
}

void print_stopped_by_signal(std::FILE* log, int signal, int64_t step) {
    fmt::print(log, "stopped by {} after step {}; checkpoint saved\n", stop_signal_name(signal), step);
    std::fflush(log);
}

}  // namespace nb

#include "src/run/checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <mutex>
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
#include "pipeline/stage/fault_injection.h"
#include "pipeline/stage/stage_checkpoint.h"
#include "src/data/data_fingerprint.h"
#include "src/data/tokenizer_file.h"

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

// The data files of --data and --val-data, as they were when this process first asked (the run's start:
// claim_save_dir and read_resume_point ask before any step), so that every save records the data the run trains
// on. Fingerprinting reads up to 1 MiB per file (src/data/data_fingerprint.h): once per process, not per save.
const std::vector<DataFileFingerprint>& data_files_of(const std::string& path_or_glob) {
    static std::mutex mutex;
    static std::map<std::string, std::vector<DataFileFingerprint>> known;
    const std::lock_guard lock(mutex);
    auto it = known.find(path_or_glob);
    if (it == known.end()) it = known.emplace(path_or_glob, fingerprint_data(path_or_glob)).first;
    return it->second;
}

// The flags whose files a checkpoint records, with their values.
std::vector<std::pair<std::string, std::string>> data_flags(const TrainOptions& o) {
    return {{"--data", o.data_path}, {"--val-data", o.val_data_path}};
}

std::string data_files_json(const TrainOptions& options) {
    std::string out;
    for (const auto& [flag, path] : data_flags(options)) {
        const std::string files = json_list(data_files_of(path), [](const DataFileFingerprint& f) {
            return fmt::format("{{\"path\": {}, \"bytes\": {}, \"fingerprint\": {}}}", json_quote(f.path), f.bytes,
                               json_quote(f.sha256));
        });
        out += fmt::format("{}{}: {}", out.empty() ? "" : ", ", json_quote(flag), files);
    }
    return "{" + out + "}";
}

// The tokenizer's identity, or null for a run without one (an older checkpoint has no field at all).
std::string tokenizer_json(const std::optional<TokenizerFile>& tokenizer) {
    if (!tokenizer) return "null";
    return fmt::format("{{\"sha256\": {}, \"vocab_size\": {}}}", json_quote(tokenizer->sha256), tokenizer->vocab_size);
}

// The run's tokenizer.json, copied into the checkpoint being staged in `staging_dir`: the bytes the run began with
// (their sha256 is its identity; nb::RuntimeError naming the file where it changed since).
CheckpointEntry copy_tokenizer(const TokenizerFile& tokenizer, const std::string& staging_dir) {
    return write_checkpoint_file(staging_dir, kTokenizerFileName, read_tokenizer_bytes(tokenizer));
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
        "    \"rng\": {{\"seed\": {}, \"data_order_epoch\": {}}},\n    \"elapsed_s\": {:.6f},\n"
        "    \"data_files\": {},\n    \"tokenizer\": {}\n  }}",
        json_quote(kProgramVersion), id, saved.cut.size(), cut, steps, saved.data.epoch, saved.data.index,
        options.seed, saved.data.epoch, saved.elapsed_s, data_files_json(options), tokenizer_json(options.tokenizer));
}

// The saved identity against this run's: the first field that differs, with both values.
void check_identity(const Json& saved, const TrainOptions& options, const std::string& source) {
    for (const auto& [key, value] : identity_of(options)) {
        const std::string& was = json_string(json_at(saved, key, source), source, key);
        if (was != value)
            throw RuntimeError(fmt::format("'{}': field 'identity.{}' is '{}' there, '{}' in this run: resuming would "
                                           "not continue the saved run",
                                           source, key, was, value));
    }
}

// A difference in the data: an error, or with --allow-data-change a line of the resumed run's log.
void data_differs(const TrainOptions& options, const std::string& source, const std::string& problem,
                  std::vector<std::string>& notes) {
    if (!options.allow_data_change)
        throw RuntimeError(fmt::format("'{}': {} (--allow-data-change resumes on other data)", source, problem));
    notes.push_back("--allow-data-change: " + problem + "; resuming on this run's data");
}

std::vector<DataFileFingerprint> saved_files(const Json& list, const std::string& source) {
    std::vector<DataFileFingerprint> files;
    for (const Json& f : json_array(list, source, "data_files")) {
        files.push_back({json_string(json_at(f, "path", source), source, "path"),
                         json_int64(json_at(f, "bytes", source), source, "bytes"),
                         json_string(json_at(f, "fingerprint", source), source, "fingerprint")});
    }
    return files;
}

// The data against the checkpoint's: the same number of files, and each the same size and fingerprint as the saved
// file in its place, whatever its path. A checkpoint written before fingerprints (no "data_files") has only the
// paths as spelt then, in its identity: those must match, as they had to then.
void check_data(const Json& run, const TrainOptions& options, const std::string& source,
                std::vector<std::string>& notes) {
    const auto it = run.find("data_files");
    if (it == run.end()) {
        const Json& id = json_object(json_at(run, "identity", source), source, "identity");
        for (const auto& [flag, key] : {std::pair{"--data", "data"}, std::pair{"--val-data", "val_data"}}) {
            const std::string& was = json_string(json_at(id, key, source), source, key);
            const std::string& now = flag == std::string("--data") ? options.data_path : options.val_data_path;
            if (was != now)
                data_differs(options, source, fmt::format("{} is '{}', the checkpoint (written before data "
                                                          "fingerprints) was saved with '{}'", flag, now, was), notes);
        }
        return;
    }
    const Json& saved = json_object(*it, source, "data_files");
    for (const auto& [flag, path] : data_flags(options)) {
        const std::vector<DataFileFingerprint> was = saved_files(json_at(saved, flag, source), source);
        const std::vector<DataFileFingerprint>& now = data_files_of(path);
        if (was.size() != now.size()) {
            data_differs(options, source, fmt::format("{} matches {} files, the checkpoint was saved with {}", flag,
                                                      now.size(), was.size()), notes);
            continue;
        }
        for (size_t i = 0; i < now.size(); ++i) {
            if (now[i] == was[i]) continue;
            const std::string how = now[i].bytes != was[i].bytes
                ? fmt::format("{} bytes, the checkpoint's '{}' had {}", now[i].bytes, was[i].path, was[i].bytes)
                : fmt::format("its content fingerprint differs from that of the checkpoint's '{}' (both {} bytes)",
                              was[i].path, now[i].bytes);
            data_differs(options, source, fmt::format("{} file '{}' is not the file the checkpoint was saved with: {}",
                                                      flag, now[i].path, how), notes);
        }
    }
}

// "'PATH' (N ids, sha256 0123456789ab...)" for the lines below.
std::string describe_tokenizer(const std::string& path, int64_t vocab_size, const std::string& sha256) {
    return fmt::format("'{}' ({} ids, sha256 {}...)", path, vocab_size, sha256.substr(0, 12));
}

// The tokenizer against the checkpoint's, by the data's rule (check_data): a difference (another file, one where
// the checkpoint had none, or none where it had one) is refused naming both, unless --allow-data-change. A
// checkpoint written before tokenizers were recorded (no "tokenizer" field) is checked against nothing.
void check_tokenizer(const Json& run, const TrainOptions& options, const std::string& step_dir,
                     const std::string& source, std::vector<std::string>& notes) {
    const auto it = run.find("tokenizer");
    if (it == run.end()) return;
    const std::optional<TokenizerFile>& now = options.tokenizer;
    const std::string ours = now ? "this run's tokenizer " + describe_tokenizer(now->path, now->vocab_size,
                                                                                now->sha256)
                                 : "this run has no tokenizer (no --tokenizer, no tokenizer.json beside the --data "
                                   "shards)";
    if (it->is_null()) {
        if (now) data_differs(options, source, ours + ", the checkpoint was saved without one", notes);
        return;
    }
    const Json& saved = json_object(*it, source, "tokenizer");
    const std::string& sha256 = json_string(json_at(saved, "sha256", source), source, "tokenizer.sha256");
    const int64_t vocab_size = json_int64(json_at(saved, "vocab_size", source), source, "tokenizer.vocab_size");
    if (now && now->sha256 == sha256) return;
    const std::string theirs = describe_tokenizer(step_dir + "/" + kTokenizerFileName, vocab_size, sha256);
    data_differs(options, source,
                 now ? fmt::format("{} is not the checkpoint's {}", ours, theirs)
                     : fmt::format("{}, the checkpoint was saved with {}", ours, theirs),
                 notes);
}

int64_t int_field(const Json& o, const char* key, const std::string& source) {
    return json_int64(json_at(o, key, source), source, key);
}

std::vector<StageSpec> read_cut(const Json& run, const std::string& source) {
    std::vector<StageSpec> cut;
    for (const Json& s : json_array(json_at(run, "cut", source), source, "cut")) {
        cut.push_back({int_field(s, "first_block", source), int_field(s, "end_block", source),
                       json_bool(json_at(s, "embedding", source), source, "embedding"),
                       json_bool(json_at(s, "head", source), source, "head")});
    }
    return cut;
}

SavedRun read_saved_run(const LoadedCheckpoint& c, const std::string& source) {
    const Json& run = c.run;
    SavedRun saved;
    saved.step = c.step;
    saved.cut = read_cut(run, source);
    for (const Json& v : json_array(json_at(run, "steps_taken", source), source, "steps_taken"))
        saved.steps_taken.push_back(json_int64(v, source, "steps_taken"));
    const Json& data = json_object(json_at(run, "data", source), source, "data");
    saved.data = {static_cast<uint64_t>(int_field(data, "epoch", source)),
                  static_cast<uint64_t>(int_field(data, "index", source))};
    // The run's clock: absent from checkpoints written before it was kept (they restart it at 0).
    if (const auto it = run.find("elapsed_s"); it != run.end()) saved.elapsed_s = json_number(*it, source, "elapsed_s");
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

// A head without the embedding on a tied model: it reads the matrix from the file of the part that holds it.
bool holds_tied_copy(const StageSpec& stage, bool tied) { return tied && stage.has_head && !stage.has_embedding; }

bool overlaps(const StageSpec& a, const StageSpec& b) {
    return std::max(a.first_block, b.first_block) < std::min(a.end_block, b.end_block) ||
           (a.has_embedding && b.has_embedding) || (a.has_head && b.has_head);
}

// The checkpoints --save DIR holds at most while this run saves: --save-keep K keeps K and writes the next beside
// them; without it, every one this run writes stays: one per --save-interval and the last, at most
// ceil(train_iters / interval) (a stop's save, by a signal or --exit-interval, ends the run instead of a later one).
int64_t peak_checkpoints(const TrainOptions& o) {
    const int64_t interval = std::max<int64_t>(o.save_interval, 1);
    const int64_t saves = std::max<int64_t>(o.train_iters / interval + (o.train_iters % interval != 0), 1);
    return o.save_keep > 0 ? std::min<int64_t>(o.save_keep + 1, saves) : saves;
}

// The directory --load resumes from, where there is one (what every rank resolved before rank 0 claims DIR).
std::string resume_source(const TrainOptions& o) {
    if (o.load_path.empty()) return "";
    try {
        return find_checkpoint(o.load_path);
    } catch (const RuntimeError&) {
        return "";
    }
}

// Test-only (--kill-during manifest | switch | prune, the fault matrix): rank 0 dies inside its first save
// completed after the iteration of --kill-at-step.
SaveStepHook kill_point_of(const TrainOptions& o, int64_t step) {
    if (o.kill_rank != 0 || o.kill_at_step < 0 || step <= o.kill_at_step) return {};
    return [point = o.kill_during](SaveStep at, const std::string& path) {
        if (at == SaveStep::manifest && point == KillPoint::manifest)
            die_writing_half(path, R"({"format": 1, "step": "what a manifest begins with"})");
        if ((at == SaveStep::switch_names && point == KillPoint::switch_names) ||
            (at == SaveStep::prune && point == KillPoint::prune))
            die_by_sigkill();
    };
}

}  // namespace

std::optional<SaveDirLock> claim_save_dir(const TrainOptions& options,
                                          const std::function<int64_t()>& checkpoint_bytes) {
    if (options.save_dir.empty()) return std::nullopt;
    for (const auto& [flag, path] : data_flags(options)) data_files_of(path);  // the data as the run begins
    std::error_code ec;  // each checkpoint also keeps the tokenizer's copy (a file that cannot be sized: 0)
    const uintmax_t tokenizer = options.tokenizer ? std::filesystem::file_size(options.tokenizer->path, ec) : 0;
    const int64_t bytes = checkpoint_bytes() + (ec ? 0 : static_cast<int64_t>(tokenizer));
    SaveDirLock lock = SaveDirLock::claim(options.save_dir, bytes, peak_checkpoints(options));
    remove_stale_saves(options.save_dir, resume_source(options));
    return lock;
}

void complete_checkpoint(const TrainOptions& options, const std::string& staging_dir,
                         const std::vector<CheckpointEntry>& entries, const SavedRun& saved, std::FILE* log) {
    const SaveStepHook kill_point = kill_point_of(options, saved.step);
    std::vector<CheckpointEntry> files = entries;
    if (options.tokenizer) files.push_back(copy_tokenizer(*options.tokenizer, staging_dir));  // before the manifest
    const std::string step_dir = write_manifest(staging_dir, saved.step, files, run_json(options, saved), kill_point);
    settle_complete_staging(options.save_dir);  // the one this run resumed from, where a switch was killed
    if (options.save_keep > 0) prune_checkpoints(options.save_dir, options.save_keep, kill_point);
    int64_t bytes = 0;
    for (const CheckpointEntry& e : files) bytes += e.bytes;
    fmt::print(log, "saved checkpoint {} ({} bytes)\n", step_dir, bytes);
    std::fflush(log);
}

ResumePoint read_resume_point(const TrainOptions& options, const std::vector<StageSpec>& cut) {
    const std::set<std::string> none;
    const LoadedCheckpoint c = read_checkpoint(find_checkpoint(options.load_path), &none);
    const std::string source = c.step_dir + "/manifest.json";
    const Json& run = c.run;
    check_identity(json_object(json_at(run, "identity", source), source, "identity"), options, source);
    ResumePoint r{c.step_dir, c.format, read_saved_run(c, source), {}};
    check_data(run, options, source, r.notes);
    check_tokenizer(run, options, c.step_dir, source, r.notes);
    check_stage_count(options, r.saved, cut, source);
    if (r.saved.step < 0 || r.saved.step > options.train_iters)
        throw RuntimeError(fmt::format("'{}': field 'step' is {}, outside this run's {} iterations", source,
                                       r.saved.step, options.train_iters));
    return r;
}

SavedCheckpoint read_saved_checkpoint(const std::string& path) {
    const std::set<std::string> none;
    LoadedCheckpoint c = read_checkpoint(find_checkpoint(path), &none);
    ResumePoint resume{c.step_dir, c.format, read_saved_run(c, c.step_dir + "/manifest.json"), {}};
    return {std::move(resume), std::move(c.run)};
}

StageFiles read_stage_files(const ResumePoint& resume, const StageSpec& stage, bool tied) {
    const std::string manifest = resume.step_dir + "/manifest.json";
    std::set<std::string> wanted;
    std::set<int64_t> steps;
    for (size_t s = 0; s < resume.saved.cut.size(); ++s) {
        if (overlaps(resume.saved.cut[s], stage)) {
            wanted.insert(stage_file_name(static_cast<int>(s), resume.format));
            steps.insert(resume.saved.steps_taken[s]);
        }
        if (holds_tied_copy(stage, tied) && resume.saved.cut[s].has_embedding)  // the matrix, written once
            wanted.insert(stage_file_name(static_cast<int>(s), resume.format));   // (tied_gradient.h)
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
        out.files.push_back(decode_stage_file(it->second, file, resume.format));
        out.source += (out.source.empty() ? "" : ", ") + file;
    }
    out.by_name = tensors_by_name(out.files, out.source);
    return out;
}

void save_one_stage(const TrainOptions& options, int64_t step, double elapsed_s, StageState& stage,
                    const LoaderPosition& data, std::FILE* log) {
    const std::string dir = make_staging_dir(options.save_dir, step);
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
    for (const std::string& note : resume.notes) fmt::print(log, "{}\n", note);
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

// Everything `nobubble train` is told, after the command line and config file are parsed: names already turned
// into enums at the command-line boundary. Whether the options make a run is make_run_plan's to decide
// (src/plan/run_plan.h: every rule between the flags, once).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/named_weights.h"
#include "model/partition.h"
#include "model/recompute.h"
#include "src/core/name_table.h"
#include "src/core/tensor.h"
#include "src/data/tokenizer_file.h"
#include "optim/delay_fix.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer_config.h"
#include "src/plan/run_shape.h"
#include "src/plan/schedule_spec.h"

namespace nb {

// --clip-scope: the norm that clips a stage's gradients.
enum class ClipScope {
    global,  // the norm over every stage (gpipe, 1f1b: their stages step together)
    stage,   // each stage its own norm (2bw, pipedream: their stages step at different times)
};
inline constexpr auto kClipScopes = name_table<ClipScope>("--clip-scope", {
    {"global", ClipScope::global, "norm over all stages"},
    {"stage", ClipScope::stage, "each stage its own norm"},
});
// kClipScopes.parse and .name.
ClipScope parse_clip_scope(std::string_view name);
std::string_view clip_scope_name(ClipScope scope);
// docs/DESIGN.md section 2: the scope a schedule clips with (the default of --clip-scope, and the only one it accepts).
ClipScope clip_scope_of(ScheduleKind schedule);

// Test-only (--kill-during, the fault matrix): where a rank kills itself with SIGKILL, as a node that dies does.
enum class KillPoint {
    forward,     // as a forward of the step begins
    receive,     // at a receive of the step (the rank waits on a peer)
    optimizer,   // inside the optimizer step, before the update
    checkpoint,  // halfway through writing its checkpoint file (the save after the step's iteration)
    // Rank 0 (the one that completes checkpoints), in the first save that completes after the step's iteration:
    manifest,     // halfway through writing the manifest, every stage file written
    switch_names, // between the switch's two renames: an earlier save of the step aside, the new one not in place
    prune,        // halfway through --save-keep's pruning: an older step's manifest removed, its files not
};
inline constexpr auto kKillPoints = name_table<KillPoint>("--kill-during", {
    {"forward", KillPoint::forward},
    {"receive", KillPoint::receive},
    {"optimizer", KillPoint::optimizer},
    {"checkpoint", KillPoint::checkpoint, "mid-write"},
    {"manifest", KillPoint::manifest, "rank 0, mid-write"},
    {"switch", KillPoint::switch_names, "rank 0, between the renames"},
    {"prune", KillPoint::prune, "rank 0, mid-prune"},
});
KillPoint parse_kill_point(std::string_view name);  // kKillPoints.parse

struct TrainOptions {
    ModelConfig model;
    Device device = Device::cpu;    // --device cpu | cuda
    std::string data_path;          // --data: text file (bytes) or llm.c shards (*.bin, glob)
    std::string val_data_path;      // --val-data: optional separate validation corpus
    double val_fraction = 0.1;      // --val-fraction: held back from --data when --val-data is absent
    // The tokenizer that made --data's ids (src/data/tokenizer_file.h), read once at the command line: --tokenizer
    // FILE (`tokenizer_given`), or the tokenizer.json beside llm.c shards; none for byte text. A checkpoint records
    // it and keeps a copy (src/run/checkpoint.h).
    std::optional<TokenizerFile> tokenizer = {};
    bool tokenizer_given = false;
    int64_t micro_batch_size = 8;   // --micro-batch-size
    int64_t num_microbatches = 1;   // --num-microbatches (gradient accumulation steps)
    int64_t seq_length = 256;       // --seq-length
    int64_t train_iters = 100;      // --train-iters (optimizer steps)
    LrScheduleConfig lr;            // --lr, --min-lr, --lr-warmup-iters, --lr-decay-style, ...
    OptimizerConfig optimizer;      // --optimizer and its hyperparameter flags (optim/optimizer_config.h)
    double clip_grad = 1.0;         // --clip-grad (0: off)
    uint64_t seed = 1234;           // --seed
    int64_t eval_interval = 0;      // --eval-interval (0: only at the end)
    int64_t eval_iters = 10;        // --eval-iters (batches of num_microbatches microbatches)
    int64_t log_interval = 10;      // --log-interval
    // Samples (src/run/train_sample.h): every --sample-interval iterations (0: none), after evaluation, rank 0
    // continues --sample-prompt ("": from <|endoftext|>, or a newline for bytes) by --sample-tokens tokens.
    int64_t sample_interval = 0;
    std::string sample_prompt;
    int64_t sample_tokens = 64;
    std::string metrics_path;       // --metrics FILE.jsonl
    std::string trace_path;         // --trace FILE.json: Chrome/Perfetto trace of the pipeline, one track per stage

    // Checkpoints (docs/DESIGN.md section 8, src/run/checkpoint.h). Steps here are iterations (t in step_<t>):
    // optimizer steps, except under pipedream, whose iteration makes m of them.
    std::string save_dir;           // --save DIR: checkpoints go to DIR/step_<t>/
    int64_t save_interval = 0;      // --save-interval N: after every N-th iteration (and the last)
    int save_keep = 0;              // --save-keep K: keep the K newest complete checkpoints (0: all)
    std::string load_path;          // --load DIR (its newest complete checkpoint) or DIR/step_<t>
    bool allow_data_change = false; // --allow-data-change: --load resumes on data other than the checkpoint's
    int64_t exit_interval = 0;      // --exit-interval N: stop (saving first, with --save) after step N, 2N, ...
    // --init-from-hf DIR (src/run/hf_folder.h): the model's shape is DIR's config.json and every stage's initial
    // weights are its tensors, by name (StageState), in place of --seed's; the optimizer starts fresh.
    // --pretrained-checkpoint CKPT (Megatron's name): the same from a checkpoint's newest master weights (the model
    // flags must give its shape), with nothing else of it (step 0, fresh optimizer, data from the start).
    std::string init_from_hf;
    std::string pretrained_checkpoint;
    std::shared_ptr<const NamedWeights> initial_weights;  // null: from --seed (StageModel::init_weights)
    std::string initial_weights_source;                   // the folder or checkpoint, for errors

    // Pipeline (the pipeline issue): the schedule and the number of stages. `train` without mpirun and with
    // --stages 1 is the plain single-process loop.
    ScheduleKind schedule = ScheduleKind::one_f_one_b;  // --schedule gpipe | 1f1b | 2bw | pipedream | zb-h1 | zb-v
    int stages = 1;                  // --stages P (in-process stages, or the MPI world size under mpirun)
    // Data parallelism (docs/DESIGN.md section 2, "Data parallelism"): D replicas of the pipeline, replica r taking
    // microbatches [r m, (r+1) m) of every global batch of D m; each stage's gradient is its replicas' sums added in
    // replica order, over D m. `train` runs it under mpirun -np P*D.
    int data_parallel_size = 1;      // --data-parallel-size D
    int64_t global_batch_size = 0;   // --global-batch-size: sequences per iteration, checked against D m B (0: unset)
    bool distributed_optimizer = false;  // --use-distributed-optimizer: the state sharded over the D replicas
    int virtual_stages = 1;          // --virtual-stages V: model chunks per stage; 1f1b with V > 1 is interleaved
                                     // (read schedule_spec().chunks_per_rank(): zb-v always has 2)
    // The stage cut (model/partition.h, chosen by src/plan/pipeline_cut.h): --pipeline-cut cost | params, or
    // --pipeline-layout's blocks per stage (empty: not given), which overrides it.
    PipelineCut pipeline_cut = PipelineCut::cost;
    std::vector<int64_t> pipeline_layout;
    ClipScope clip_scope = ClipScope::global;  // --clip-scope (default: clip_scope_of(schedule))
    bool stop_on_nan = true;         // --stop-on-nan: a non-finite loss ends the run with a runtime error
    // --recompute-granularity, --recompute-method, --recompute-num-layers (model/recompute.h): which blocks keep
    // only their input and rerun their forward in the backward (the same bits).
    RecomputeConfig recompute;

    // Delay mitigations (docs/DESIGN.md section 2, "Mitigations"): --delay-fix none | ef | taylor (2bw only), and the
    // optimizer steps run synchronously at the start and at the end of an asynchronous schedule.
    DelayFixConfig delay_fix;        // --delay-fix, --taylor-lambda
    int64_t sync_start = 0;          // --sync-start K
    int64_t sync_cooldown = 0;       // --sync-cooldown K

    // Test-only fault injection (--fail-at-step N --fail-rank R, for the pipeline's fault tests): the stage run
    // by rank R raises a RuntimeError as it begins optimizer step N (counted from 0, as `nobubble schedule`
    // numbers steps). -1: off.
    int64_t fail_at_step = -1;
    int fail_rank = -1;
    // Test-only (--signal-at-step N --signal-rank R): rank R records a SIGTERM as optimizer step N begins, as if
    // one had arrived then (src/core/stop_signal.h). -1: off.
    int64_t signal_at_step = -1;
    int signal_rank = 0;
    // Test-only stall (--stall-at-step N --stall-rank R, for the watchdog's tests): rank R sleeps forever as it
    // begins optimizer step N, as a wedged rank would, so that the other ranks' watchdogs must end the job. -1: off.
    int64_t stall_at_step = -1;
    int stall_rank = -1;
    // Test-only (--kill-at-step N --kill-rank R --kill-during POINT): rank R dies by SIGKILL at POINT of optimizer
    // step N. -1: off.
    int64_t kill_at_step = -1;
    int kill_rank = -1;
    KillPoint kill_during = KillPoint::forward;

    // --watchdog-s S (under mpirun): a rank whose stage made no progress for S seconds names what it waits for
    // and aborts the job (src/run/watchdog.h). 0: off. The in-process pipeline finds its deadlocks itself.
    double watchdog_s = 300;

    // The batch and pipeline counts (B, m, T, P, D, V) as one RunShape (src/plan/run_shape.h), and back.
    RunShape shape() const;
    void set_shape(const RunShape& shape);
    // The schedule these options ask for (not validated: make_run_plan does that).
    ScheduleSpec schedule_spec() const {
        return {schedule, stages, num_microbatches, train_iters, sync_start, sync_cooldown, virtual_stages};
    }
    // An iteration's global batch: D x m microbatches of B sequences of T tokens.
    int64_t microbatches_per_iter() const { return data_parallel_size * num_microbatches; }
    int64_t tokens_per_iter() const { return microbatches_per_iter() * micro_batch_size * seq_length; }
    // "--optimizer muon --delay-fix ef --sync-start 5": the update rule, for the runs' header lines (the delay
    // flags only where they are set).
    std::string describe_update_rule() const;
    // "3 stages", or with chunks "2 stages x 2 chunks" (for the header lines).
    std::string describe_stages() const;
};

}  // namespace nb

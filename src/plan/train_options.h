// Everything `nobubble train` is told, after the command line and config file are parsed.
#pragma once

#include <cstdint>
#include <string>

#include "model/config.h"
#include "src/core/tensor.h"
#include "optim/delay_fix.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer_config.h"

namespace nb {

struct TrainOptions {
    ModelConfig model;
    Device device = Device::cpu;    // --device cpu | cuda
    std::string data_path;          // --data: text file (bytes) or llm.c shards (*.bin, glob)
    std::string val_data_path;      // --val-data: optional separate validation corpus
    double val_fraction = 0.1;      // --val-fraction: held back from --data when --val-data is absent
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
    std::string metrics_path;       // --metrics FILE.jsonl
    std::string trace_path;         // --trace FILE.json: Chrome/Perfetto trace of the pipeline, one track per stage

    // Pipeline (the pipeline issue): the schedule and the number of stages. `train` without mpirun and with
    // --stages 1 is the plain single-process loop.
    std::string schedule = "1f1b";   // --schedule gpipe | 1f1b | 2bw | pipedream
    int stages = 1;                  // --stages P (in-process stages, or the MPI world size under mpirun)
    std::string clip_scope = "global";  // --clip-scope global | stage (2bw / pipedream clip per stage)
    bool stop_on_nan = true;         // --stop-on-nan: a non-finite loss ends the run with a runtime error

    // Delay mitigations (DESIGN section 2, "Mitigations"): --delay-fix none | ef | taylor (2bw only), and the
    // optimizer steps run synchronously at the start and at the end of an asynchronous schedule.
    DelayFixConfig delay_fix;        // --delay-fix, --taylor-lambda
    int64_t sync_start = 0;          // --sync-start K
    int64_t sync_cooldown = 0;       // --sync-cooldown K

    // Test-only fault injection (--fail-at-step N --fail-rank R, for the pipeline's fault tests): the stage run
    // by rank R raises a RuntimeError as it begins optimizer step N (counted from 0, as `nobubble schedule`
    // numbers steps). -1: off.
    int64_t fail_at_step = -1;
    int fail_rank = -1;

    int64_t tokens_per_iter() const { return micro_batch_size * num_microbatches * seq_length; }
    // Throws UsageError naming the flag for impossible values (the model validates itself).
    void validate() const;
    // validate(), with the LR schedule's iteration flags counted in optimizer steps: one per iteration, or one
    // per microbatch (pipedream). How `train` and `reference` check a pipeline run's flags.
    void validate_counting_steps(bool one_step_per_microbatch) const;
    // The pipeline's own rules, shared by `train` and `reference`: a clip scope that fits the schedule
    // (asynchronous: per stage; synchronous: global) and no tied embeddings across stages.
    void validate_clip_scope_and_ties(bool asynchronous_schedule) const;
    // The mitigations' rules, shared by `train` and `reference` (`schedule` already known to be valid):
    // --delay-fix ef/taylor with 2bw only; --sync-start/--sync-cooldown >= 0, with 2bw or pipedream only, and
    // together at most the run's `optimizer_steps`.
    void validate_delay_mitigations(int64_t optimizer_steps) const;
    // "--optimizer muon --delay-fix ef --sync-start 5": the update rule, for the runs' header lines (the delay
    // flags only where they are set).
    std::string describe_update_rule() const;
};

}  // namespace nb

// Pipeline schedules as pure data: for every stage, the ordered list of actions it runs.
//
// No model, no transport: the executor runs a stage's list action by action, the simulator (simulate.h) times
// it, `nobubble schedule` prints it and the tests check it. Exact semantics: docs/DESIGN.md section 2.
//
// Notation: p stages, stage s in [0, p) (stage 0 holds the embedding, stage p-1 the loss); m microbatches per
// iteration; T iterations. Microbatches are numbered globally: microbatch i of iteration t is t*m + i, and that
// is also the order in which the data is consumed. W_v is a stage's weights after v optimizer steps.
//
// Optimizer steps. gpipe, 1f1b and 2bw make one step per iteration (T steps); step t applies the gradient of
// microbatches [t*m, (t+1)*m). pipedream makes one step per microbatch (T*m steps; batch = 1 microbatch); step i
// applies the gradient of microbatch i. In an Action, `step` is the optimizer step the action belongs to.
//
// Weight versions (the `version` of a forward/backward: the W_v it uses; the backward always uses the same
// version as the forward of that microbatch on that stage, i.e. the weights are stashed):
//   gpipe, 1f1b,  step t uses W_t                                                      (1 version per stage)
//   zb-h1
//   2bw           step t uses W_{max(t-1, 0)} on every stage                           (2 versions per stage)
//   pipedream     microbatch i uses W_{max(0, i-(p-1-s))} at stage s                   (p-s versions at stage s)
// The optimizer step of step t produces version t+1 (its `version`).
//
// --sync-start K / --sync-cooldown K (2bw and pipedream; counted in optimizer steps): the first K and the last K
// steps run as 1f1b with a flush after each, using W_t for step t. Each switch between synchronous and
// asynchronous steps drains the pipeline. The asynchronous steps keep their rule "as if it had always held":
//   2bw           step t >= K uses W_{t-1} (the double buffer still holds it; at t = K that is the last
//                 synchronous version, so the first async step is already one step stale)
//   pipedream     microbatch i >= K uses W_{max(K, i-(p-1-s))} (K = the first asynchronous microbatch)
// For gpipe and 1f1b, which are synchronous already, the two flags change nothing.
//
// Order of actions within each schedule:
//   gpipe      per step: all m forwards, then all m backwards, both in microbatch order, then the step.
//   1f1b       per step: stage s runs min(p-s-1, m) warm-up forwards, then one forward and one backward
//              alternately until the forwards run out, then the remaining backwards (cool-down), then the step.
//   2bw        1f1b over all steps at once with no flush between them: the next step's warm-up forwards overlap
//              this step's cool-down; stage s's optimizer step for step t comes right after its backward of the
//              last microbatch of step t.
//   pipedream  the same 1F1B stream, with an optimizer step after every backward.
//   zb-h1      per step, with the backward split into B (input gradient: backward_input) and W (weight gradient:
//              backward_weight): stage s runs 1f1b's warm-up forwards, then forward w+k and B k alternately, with
//              W k-s right after B k once k >= s; after the last forward, B k and W k-s alternately; then the
//              remaining W; then the step (Qi et al., "Zero Bubble Pipeline Parallelism", ZB-H1). W lags B by s, so
//              stage s holds at most s+1 pending W and at most p microbatches between forward and W (1f1b's stage 0
//              holds p between forward and backward: the same peak count; a stash waiting for W is larger). At F = B = W its bubble is (p-1)(F+B-W),
//              1f1b's (p-1)(F+B+W): a third.
// Every stage runs forwards in microbatch order and backwards (B and W each) in microbatch order, so the gradient
// of a step is accumulated in microbatch order (by the backward, or by W where the backward is split) (docs/DESIGN.md sections 2 and 6: a fixed order, so the bits repeat). The
// executor must still sum in microbatch index order regardless of when the backwards happen to complete.
//
// Interleaved 1F1B (--virtual-stages v > 1 with 1f1b; Narayanan et al. 2021, Megatron-LM's order): the model is
// cut into p v parts and rank r holds v chunks, chunk c being part c p + r (its virtual stage). Per step the
// rank's m v forwards go in groups of p microbatches, chunk by chunk (forward k: chunk (k / p) % v, microbatch
// (k / (p v)) p + k % p), its backwards the same with the chunks reversed; w = min(m v, 2 (p - r - 1) + (v - 1) p)
// warm-up forwards (all m v when m == p), then forward and backward alternately, then the rest of the backwards;
// each chunk's optimizer step once the rank has run its last compute of the step (chunk by chunk, in the order
// their last backwards came; in each part's own list, right after its last backward). Messages go between virtual
// stages (a forward of part j receives from part j - 1: rank r - 1, or rank p - 1's previous chunk when r = 0), and
// `peer` names the virtual stage. The per-rank lists are what the simulator times; each virtual stage's own part of
// them (virtual_stage_plans) is what its runner runs.
//
// ZB-V (--schedule zb-v; Qi et al. 2024, "Pipeline Parallelism with Controllable Memory"): two chunks per rank in a
// V, chunk 0 of rank r on part r, chunk 1 on part 2p-1-r (src/plan/stage_placement.h), every backward split into B
// and W as in zb-h1. Per step, rank r runs (the rule is stated for max(m, 2p-1) microbatches, then the computes
// of microbatches >= m are left out):
//   warm-up    2(p-r)-1 F on chunk 0; then r times F1 F0; then p-r times F1 B1 W1
//   steady     [F0 while chunk 0 has forwards left] B0 W0 F1 B1 W1, until both chunks have run every forward
//   cool-down  r times B0 B1; p-r times B0 W0; the W1 still due, then the W0 still due; then each chunk's step
// (the digits are chunks). Each chunk is half a stage, so a part's F, B and W cost half of a whole stage's. At
// F = B = W and m >= 2p-1 a step idles (p-1) F/2 per rank, the least any schedule with a flush can (the first
// microbatch needs p-1 chunk forwards to reach rank p-1): half of zb-h1's (p-1) F. (The paper's zero bubble also
// starts the next step before this one's optimizer step, which a flush does not.) Every rank holds at most 2p
// chunk stashes, p stages' worth: 1f1b's stage 0.
//
// Communication: before each forward, stage s > 0 receives the activation from s-1; after it, stage s < p-1
// sends its activation to s+1. Before each backward, stage s < p-1 receives the gradient from s+1; after it,
// stage s > 0 sends the input gradient to s-1. Sends are non-blocking; a receive waits for its matching send
// (the k-th receive on a channel matches the k-th send on it).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "model/stash_bytes.h"
#include "src/plan/schedule_spec.h"

namespace nb {

enum class ActionType {
    forward,
    backward,         // the fused backward: input and weight gradients
    backward_input,   // B of a split backward: the input gradient (what the stage below waits for)
    backward_weight,  // W of a split backward: the weight gradients, into the step's sum
    send_activation,
    recv_activation,
    send_gradient,
    recv_gradient,
    optimizer_step
};
std::string_view action_type_name(ActionType type);  // "forward", "recv_gradient", ...
bool is_compute(ActionType type);                    // forward, backward, B, W, optimizer_step
bool uses_weights(ActionType type);                  // forward, backward, B, W: reads a weight version
bool ends_microbatch(ActionType type);               // backward, W: the gradient is summed, the stash freed

struct Action {
    ActionType type;
    int64_t microbatch;  // global microbatch index (iteration * m + i); -1 for optimizer_step
    int64_t step;        // the optimizer step this action belongs to (pipedream: == microbatch)
    int64_t version;     // forward/backward: weight version used; optimizer_step: version produced (step + 1);
                         // send/recv: the version of the forward/backward on this stage it feeds or comes from
    int peer;            // send/recv: the (virtual) stage sent to / received from; -1 otherwise
    int chunk = 0;       // the rank's model chunk it runs on (its part: ScheduleSpec::placement()); else 0
    bool operator==(const Action&) const = default;
};
// Short human form: "F3 (step 0, W0)", "B3 (step 0, W0)" (fused), "B3 input (step 0, W0)",
// "W3 weight (step 0, W0)", "recv_activation mb 3 from stage 1", "optimizer_step 0 -> W1".
std::string describe(const Action& action);

// The weight version microbatch `microbatch` uses on `stage`, for its forward and its backward (table above).
int64_t weight_version(const ScheduleSpec& spec, int stage, int64_t microbatch);
// How many versions an asynchronous step of `stage` lags, the updates made while its version is in use: 2bw 1,
// pipedream p-1-s (0 on the last stage), the synchronous schedules 0. --delay-fix predict looks this far ahead.
int64_t asynchronous_delay(const ScheduleSpec& spec, int stage);

using StagePlan = std::vector<Action>;

// One ordered action list per stage (index = stage; with virtual stages, per rank). Validates the spec first.
std::vector<StagePlan> build_schedule(const ScheduleSpec& spec);

// Each virtual stage's own list, from the ranks' lists: chunk c of rank r is stage placement.part(r, c). With
// one chunk per rank, the lists themselves. std::invalid_argument unless there is a plan per rank of `placement`.
std::vector<StagePlan> virtual_stage_plans(const std::vector<StagePlan>& rank_plans, const StagePlacement& placement);

// The most weight versions `stage` must hold at once: the newest version, plus every existing version that a
// forward or backward still to come on that stage uses (stashed versions of microbatches in flight, and the
// older buffer that 2bw forwards from). With virtual stages: per chunk, the most over the rank's chunks.
int64_t max_versions_held(const std::vector<StagePlan>& plans, int stage);

// The most microbatches in flight on `stage` at once: forward done, backward (or W) not yet (activation stashes).
// With virtual stages, counted in chunks (a chunk's stash is about 1/v of the stage's).
int64_t max_in_flight(const std::vector<StagePlan>& plans, int stage);

// The shortest run of `spec`'s shape whose action lists reach the same peaks (versions held, microbatches in
// flight) on every stage: each synchronous phase cut to 2 steps (they are all alike, flushed), the asynchronous one
// to what its warm-up, steady state and cool-down need (2bw: 4 steps, each of m >= p microbatches; pipedream:
// 4 p + 4 microbatches), keeping pipedream's step counts modulo m so that the run is whole iterations.
// tests/unit/test_action_stream.cpp checks the peaks against whole runs.
ScheduleSpec representative_run(const ScheduleSpec& spec);

// representative_run's action lists per virtual stage (index = part: placement().part(rank, chunk)).
std::vector<StagePlan> representative_part_plans(const ScheduleSpec& spec);

// The most activation bytes `plan`'s part holds at once, each microbatch's stash as `one` has it: kept from its
// forward until its backward, its backward's (or B's) peak while that runs, then nothing (or, after B, what its
// W reads until W). What the stage's meter measures (pipeline/stage/stage_meter.h, the progress line's act MiB).
int64_t peak_stash_bytes(const StagePlan& plan, const MicrobatchStashBytes& one);

// Per virtual stage (index = part: placement().part(rank, chunk)): max_versions_held and max_in_flight of the
// whole run, read off representative_run's lists. O(p m) whatever --train-iters is.
struct PartPeaks {
    int64_t versions_held = 1;
    int64_t in_flight = 1;
    bool operator==(const PartPeaks&) const = default;
};
std::vector<PartPeaks> part_peaks(const ScheduleSpec& spec);

}  // namespace nb

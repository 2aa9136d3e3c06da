// Timing a schedule without a model: every stage runs its action list in order, with fixed costs.
//
// Rules: a forward, backward or optimizer step occupies its stage for its cost. A send takes no stage time
// (non-blocking) and its data arrives p2p_ms later. A receive waits until its matching send's data has arrived:
// it completes at max(the time the stage reaches it, send time + p2p_ms). The k-th receive on a channel
// (from, to, activation|gradient) matches the k-th send on it. When no stage can progress before all are done
// the run is a deadlock, reported with what each stuck stage waits for.
//
// With virtual stages (interleaved 1F1B, zb-v: actions on chunks 0..v-1 of each rank, peers named by virtual stage)
// a plan is one rank's list, the placement says which virtual stage each chunk runs, channels join virtual stages,
// and a chunk's compute costs 1/v of the costs given: they are a whole stage's share of the model (p stages), of
// which a chunk holds 1/v.
//
// With step_barrier (the synchronous schedules: their global clip all-gathers every part's sums of squares before
// any part updates) an optimizer step completes at max(the time every part of the model has reached its step t)
// + optimizer_ms: no part starts step t+1 before every part has finished step t's backwards. Without it (2bw,
// pipedream: each stage clips by its own norm) a step depends on its own stage only.
//
// With replica_sum_ms > 0 (data parallelism, src/plan/rank_layout.h): step t's sum of a part's gradient over its
// replicas starts when the part's last backward (or W) of step t ends and takes replica_sum_ms (scaled by the part
// like its compute, and 1/v per chunk), on the network, not the stage; the part's optimizer step (and, under
// step_barrier, its arrival there) waits for it. The wait it causes is the exposed reduction (replica_wait_ms).
// Its cost from the alpha-beta model: replica_sum_cost_ms.
//
// The simulation is event-driven (a stage runs until it blocks; a send wakes the stage waiting on its
// channel), so it costs O(total actions).
#pragma once

#include <string>
#include <vector>

#include "pipeline/schedule/schedule.h"

namespace nb {

struct SimCosts {
    double forward_ms = 1;
    double backward_input_ms = 1;   // B, the input half of a backward
    double backward_weight_ms = 1;  // W, the weight half; a fused backward costs B + W
    double p2p_ms = 0;
    double optimizer_ms = 0;
    // Per virtual stage (part of the model), its compute time relative to an even part's (1 / parts of the model),
    // which the costs above are: a part with twice an even part's FLOPs takes twice as long. Empty: every part 1.
    std::vector<double> part_scale;
    bool step_barrier = false;  // optimizer step t waits for every part's (steps_synchronize)
    double replica_sum_ms = 0;  // data parallelism: the sum of an even stage's step gradient over its replicas
    double backward_ms() const { return backward_input_ms + backward_weight_ms; }
    // nb::UsageError naming the flag: forward_ms > 0 (it is the timeline's column width), the others >= 0; each
    // part_scale finite and >= 0.
    void validate() const;
};

// The alpha-beta cost of summing `bytes` of gradient over `replicas` replicas as the executor does
// (pipeline/stage/replica_grad_sum.h: a reduce-scatter and an all-gather round, each D - 1 messages of bytes / D per
// replica, sent one after another): 2 (D - 1) latency_us + 2 (D - 1) / D bytes / (gbps 1e9 / 8), the ring
// all-reduce's figure. 0 for one replica. nb::UsageError for gbps <= 0 or latency < 0 when D > 1.
double replica_sum_cost_ms(double bytes, int replicas, double gbps, double latency_us);

// Whether a schedule's optimizer steps wait for every stage's (its clip is global: the synchronous schedules).
bool steps_synchronize(ScheduleKind kind);

// How long `type` occupies a stage: the compute costs; 0 for sends and receives (their waiting is not a cost).
double action_cost_ms(ActionType type, const SimCosts& costs);

struct TimedAction {
    Action action;
    double start_ms;  // when the stage reached the action
    double end_ms;    // when it finished (a receive: when its data had arrived; a send: start_ms)
};

struct SimResult {
    double makespan_ms = 0;                          // the latest end over all stages
    std::vector<double> busy_ms;                     // compute (forward, backward, optimizer) per stage
    double bubble_fraction = 0;                      // 1 - sum(busy_ms) / (stages * makespan_ms)
    std::vector<double> replica_wait_ms;             // per stage: its steps' waits for the replicas' sum
    std::vector<std::vector<TimedAction>> timeline;  // per stage, the actions it ran, in order
    bool deadlock = false;                           // some stage could not finish its list
    std::string deadlock_reason;                     // which stage waits for what
};

// One plan per rank of `placement`. std::invalid_argument for a plan count that is not its ranks, an action on a
// chunk it does not have, a send or receive whose peer is no other virtual stage, or a part_scale that is not
// empty and not one per part.
SimResult simulate(const std::vector<StagePlan>& plans, const SimCosts& costs, const StagePlacement& placement);
// One chunk per rank: stage s is rank s.
SimResult simulate(const std::vector<StagePlan>& plans, const SimCosts& costs);

}  // namespace nb

// Turns a rank's compute order (pipeline/schedule/compute_order.h) into its actions, one compute at a time: receive,
// compute, send; and the optimizer step after the backward (or W) of the last microbatch of each step: right after
// it, or with chunks once the rank has no compute of that step left (so that a rank's list never has a chunk's step
// before the other chunks' work of the same step: a step that waits for every part's, as under the global clip,
// could then never be reached by them). With chunks, each compute runs on its chunk's virtual stage vs
// (spec.placement()) and talks to vs - 1 and vs + 1.
//
// It holds only the optimizer steps that came due and wait for their place, so the whole run's list
// (build_schedule) and the executor's lazy one (pipeline/schedule/action_stream.h) expand alike at any length.
#pragma once

#include <vector>

#include "pipeline/schedule/compute_order.h"

namespace nb {

class ActionExpander {
public:
    ActionExpander(const ScheduleSpec& spec, int rank);

    // Appends the actions of `c` to `out` (with the optimizer steps due before it).
    void add(const Compute& c, std::vector<Action>& out);
    // The order has ended: the optimizer steps still due, to `out`.
    void finish(std::vector<Action>& out);

private:
    ScheduleSpec spec_;
    StagePlacement placement_;
    int rank_;
    std::vector<Action> due_steps_;  // optimizer steps whose chunk is done with the step, in the order they came due
};

}  // namespace nb

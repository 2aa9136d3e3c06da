// The data-parallel reduction of a stage's gradients (docs/DESIGN.md section 2, "Data parallelism").
//
// Each of the D replicas of a stage sums its own microbatches' gradients (in microbatch order, as one replica does);
// the stage's gradient of the step is those D sums added in replica order, ((g_0 + g_1) + g_2) + ... + g_{D-1},
// then scaled by 1 / (D n) (average_grads, optim/grad_clip.h; n = a replica's microbatches in the step). A fixed
// order, not an all-reduce's choice, so that every run, and the oracle, gets the same bits. Every gradient slot is
// added, buffers' included (an MoE block's expert loads are counts over the whole global batch).
#pragma once

#include "model/params.h"
#include "src/ops/ops.h"

namespace nb {

// total += replica, slot by slot: the next replica's sum onto the replicas before it.
void add_replica_grads(Ops& ops, TensorSet& total, const TensorSet& replica);

}  // namespace nb

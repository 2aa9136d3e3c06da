// The memory bound of the cost cut (model/partition.h partition_model_by_cost): whether stage s of a run may hold
// blocks [first, end), by the memory check's own figures (pipeline/stage/stage_memory.h estimate_stage_memory):
// the stage's weights, the older weight versions and the microbatches in flight its schedule holds (read off the
// run's action lists, as the check reads them), its gradients and optimizer state, against the memory `train`
// checks it against. Each stage is bound alone, as under mpirun (one stage per rank); in one process the check
// then adds the stages up, which the cut leaves to it. With V chunks per rank each part is bound to 1/V of the
// budget, so that a rank's V parts fit together whichever they are.
#pragma once

#include "model/partition.h"
#include "src/ops/ops.h"
#include "src/plan/train_options.h"

namespace nb {

// Against `budget` bytes, on a backend computing in `activation_dtype`. The options' schedule must be valid
// (make_run_plan has checked it). A stage's need is a sum over its blocks, the embedding and the head
// (estimate_stage_memory is linear in them), so each question costs O(1).
StageFits stage_memory_fits(const TrainOptions& options, const AvailableMemory& budget, DType activation_dtype);

// The same against the budget of the run's own memory check: its backend's available memory (MemAvailable on the
// CPU, the GPU's free memory), the least of every MPI rank's so that every rank cuts alike. Found at the first
// question only, from a backend started for it (a run that asks none starts none); where it is not known, every
// range fits.
StageFits run_memory_fits(const TrainOptions& options);

}  // namespace nb

#include "src/plan/run_shape.h"

#include <fmt/format.h>

#include "src/core/error.h"

namespace nb {

void require_positive_flag(int64_t value, const char* flag) {
    if (value < 1) throw UsageError(fmt::format("{} must be positive, got {}", flag, value));
}

void check_run_shape(const RunShape& s) {
    require_positive_flag(s.micro_batch_size, "--micro-batch-size");
    require_positive_flag(s.num_microbatches, "--num-microbatches");
    require_positive_flag(s.seq_length, "--seq-length");
    require_positive_flag(s.stages, "--stages");
    require_positive_flag(s.data_parallel_size, "--data-parallel-size");
    require_positive_flag(s.virtual_stages, "--virtual-stages");
}

RunShape shape_for_world(RunShape shape, bool stages_given, int world) {
    check_run_shape(shape);
    if (world <= 1 || stages_given) return shape;
    if (world % shape.data_parallel_size != 0)
        throw UsageError(fmt::format("--data-parallel-size {} does not divide the {} MPI ranks (mpirun -np P*D runs "
                                     "D replicas of P stages)",
                                     shape.data_parallel_size, world));
    shape.stages = world / shape.data_parallel_size;
    return shape;
}

}  // namespace nb

// The expert bias's update, DeepSeek-V3's aux-loss-free balancing (DESIGN.md section 7), after a stage's
// optimizer step, from the loads summed over the step's microbatches:
//
//   mean_load = (load_0 + ... + load_{E-1}) / E           the sum in double, in expert order
//   b_i      += rate * sign(mean_load - load_i)           sign(0) = 0; each b_i rounded once to f32
//
// The loads are token counts (integers held in f32), so the double sum and the comparisons are exact.
#include "src/cpu/cpu_ops.h"
#include "src/ops/layer_checks.h"

namespace nb {

void CpuOps::moe_expert_bias_update(Tensor& expert_bias, const Tensor& expert_load, float rate) {
    const OpTimer timer(*this, "moe_expert_bias_update");
    const int64_t experts = check_moe_expert_bias_update(expert_bias, expert_load);
    const float* load = expert_load.f32();
    double total = 0.0;
    for (int64_t i = 0; i < experts; ++i) total += load[i];
    const double mean = total / static_cast<double>(experts);
    for (int64_t i = 0; i < experts; ++i) {
        const float sign = mean > load[i] ? 1.0f : mean < load[i] ? -1.0f : 0.0f;
        expert_bias.f32()[i] += rate * sign;
    }
}

}  // namespace nb

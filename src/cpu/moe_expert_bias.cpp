// The expert bias of aux-loss-free balancing (DeepSeek-V3; docs/DESIGN.md section 7): the loads a step gathers and the
// bias's update from them.
//
//   load_e += offsets[e+1] - offsets[e]        once per microbatch (the pairs expert e received), in f32: exact
//                                              integers up to 2^24 pairs per step
//   mean   = (sum_e load_e) / E                the sum in double, in expert order
//   b_e   += rate * sign(mean - load_e)        once per optimizer step; sign(0) = 0 leaves b_e as it was
//
// An underloaded expert (load below the mean) gains bias and so wins more selections (the router selects by
// p + b); an overloaded one loses bias. The comparison is of exact counts against a double mean, so it has no
// rounding: equal loads are seen as equal.
#include "src/cpu/cpu_ops.h"
#include "src/ops/layer_checks.h"

namespace nb {

void CpuOps::moe_expert_load_accumulate(Tensor& expert_load, const Tensor& expert_offsets) {
    const OpTimer timer(*this, "moe_expert_load_accumulate");
    const int64_t experts = check_moe_expert_load_accumulate(expert_load, expert_offsets);
    const int32_t* off = expert_offsets.i32();
    float* load = expert_load.f32();
    for (int64_t e = 0; e < experts; ++e) load[e] += static_cast<float>(off[e + 1] - off[e]);
}

void CpuOps::moe_expert_bias_update(Tensor& expert_bias, const Tensor& expert_load, float rate) {
    const OpTimer timer(*this, "moe_expert_bias_update");
    const int64_t experts = check_moe_expert_bias_update(expert_bias, expert_load);
    const float* load = expert_load.f32();
    float* bias = expert_bias.f32();
    double total = 0.0;
    for (int64_t e = 0; e < experts; ++e) total += load[e];
    const double mean = total / static_cast<double>(experts);
    for (int64_t e = 0; e < experts; ++e) {
        const float sign = mean > load[e] ? 1.0f : mean < load[e] ? -1.0f : 0.0f;
        if (sign != 0.0f) bias[e] += rate * sign;
    }
}

}  // namespace nb

// CpuOps: the fp32 reference backend. Each op family lives in its own file under src/cpu/.
//
// Determinism: no result depends on the thread count. The products are single-threaded OpenBLAS calls on tiles
// whose shapes depend on the problem alone, spread over our own threads (src/cpu/tiled_gemm.h,
// src/cpu/cpu_threads.h), so each element's sum has one order; attention's tasks are whole heads; everything else
// here is single-threaded loops in a fixed order.
#pragma once

#include "src/ops/op_profiler.h"
#include "src/ops/ops.h"

namespace nb {

class CpuOps final : public Ops {
public:
    Device device() const override { return Device::cpu; }
    DType activation_dtype() const override { return DType::f32; }
    std::optional<AvailableMemory> available_memory() const override;  // src/cpu/available_memory.cpp
    void cast(Tensor& dst, const Tensor& src) override;  // f32 only: the CPU backend has no bf16

    // Every op of the interface; each op family is defined in its own file under src/cpu/ (MoE: moe_router.cpp,
    // moe_aux_loss.cpp, moe_dispatch.cpp, moe_grouped_linear.cpp, moe_combine.cpp, moe_expert_bias.cpp;
    // optimizers: adamw.cpp, lion.cpp, adan.cpp, mars.cpp, muon.cpp, newton_schulz.cpp).
#include "src/ops/op_overrides.h"
};

}  // namespace nb

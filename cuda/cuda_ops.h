// CudaOps: the CUDA backend of the op interface (src/ops/ops.h). bf16 activations and compute weights, f32
// statistics, parameter gradients, master weights and optimizer state.
//
// Each op family lives in its own .cu file under cuda/ (linear.cu: cuBLASLt; attention.cu: the hand-written
// kernels, attention_cudnn.cu: cuDNN's fused attention; rmsnorm.cu; rope.cu; swiglu.cu; embedding.cu;
// cross_entropy.cu; elementwise.cu; the MoE ops: moe_*.cu; the optimizers: adamw_multi.cu, lion.cu, adan.cu,
// mars.cu, muon.cu, newton_schulz.cu (batched cuBLASLt), soap.cu, linalg.cu (cuBLAS f32 + cuSOLVER)), and the
// math of each kernel is written beside it. All kernels run on one stream (CudaContext::stream); host-side
// results (sum, sum_squares) and host-side shapes (the MoE grouped linear's expert offsets) synchronise it.
//
// Determinism: fixed launch shapes and fixed reduction orders, no floating-point atomics, so a run gives the
// same bits every time on the same GPU model (and cuDNN version: its attention backward is built in cuDNN's
// deterministic variant, cuda/attention_cudnn.cu).
#pragma once

#include <memory>

#include "src/ops/op_profiler.h"
#include "src/ops/ops.h"

namespace nb::cuda {

struct CudaContext;  // stream, cuBLASLt handle and workspace (cuda/context.cu)

class CudaOps final : public Ops {
public:
    CudaOps();
    ~CudaOps() override;

    Device device() const override { return Device::cuda; }
    DType activation_dtype() const override { return DType::bf16; }
    std::optional<AvailableMemory> available_memory() const override;  // cuda/available_memory.cu
    void cast(Tensor& dst, const Tensor& src) override;
    void synchronize() override;  // cuda/synchronize.cu

    // Every op of the interface (each family's file: the top of this file). The MoE ops keep probs, gates, the aux
    // loss and the bias in f32, the maps in i32, the rest in bf16 (docs/DESIGN.md section 7).
#include "src/ops/op_overrides.h"

    CudaContext& context() { return *ctx_; }

private:
    std::unique_ptr<CudaContext> ctx_;
};

// Starts the backend on this process's GPU: RuntimeError naming the CUDA error when none is usable.
std::unique_ptr<Ops> make_cuda_ops();

// Bytes of GPU memory in use on the current device (total - free, from cudaMemGetInfo): with the caching
// allocator, which keeps what it allocated, this is the run's peak plus the CUDA context.
int64_t device_memory_used_bytes();

}  // namespace nb::cuda

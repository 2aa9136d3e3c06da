// The MoE ops on CUDA: not built yet (issue 12 builds the CPU reference first). Each override stops the run with
// the same usage error, from one place, so that `--device cuda` with an MoE model fails with one clear line
// instead of a wrong result; the kernels (router + top-k, permutation, grouped GEMMs via cuBLASLt, aux loss)
// replace these one by one, each tested against the CPU (tests/cuda).
#include "cuda/cuda_ops.h"
#include "src/core/error.h"

namespace nb::cuda {

namespace {

[[noreturn]] void moe_not_built() {
    throw UsageError("MoE ops are not built for --device cuda yet (issue 12 in progress)");
}

}  // namespace

void CudaOps::moe_router_forward(Tensor&, Tensor&, Tensor&, const Tensor&, const Tensor&, bool) { moe_not_built(); }
void CudaOps::moe_router_backward(Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                  bool) {
    moe_not_built();
}
void CudaOps::moe_aux_loss_forward(Tensor&, const Tensor&, const Tensor&, float) { moe_not_built(); }
void CudaOps::moe_aux_loss_backward(Tensor&, const Tensor&, float, float) { moe_not_built(); }
void CudaOps::moe_dispatch_plan(Tensor&, Tensor&, Tensor&, const Tensor&) { moe_not_built(); }
void CudaOps::moe_permute_forward(Tensor&, const Tensor&, const Tensor&) { moe_not_built(); }
void CudaOps::moe_permute_backward(Tensor&, const Tensor&, const Tensor&) { moe_not_built(); }
void CudaOps::moe_grouped_linear_forward(Tensor&, const Tensor&, const std::vector<const Tensor*>&, const Tensor&) {
    moe_not_built();
}
void CudaOps::moe_grouped_linear_backward(Tensor&, const std::vector<Tensor*>&, const Tensor&, const Tensor&,
                                          const std::vector<const Tensor*>&, const Tensor&) {
    moe_not_built();
}
void CudaOps::moe_combine_forward(Tensor&, const Tensor&, const Tensor&, const Tensor&) { moe_not_built(); }
void CudaOps::moe_combine_backward(Tensor&, Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&) {
    moe_not_built();
}
void CudaOps::moe_expert_load_accumulate(Tensor&, const Tensor&) { moe_not_built(); }
void CudaOps::moe_expert_bias_update(Tensor&, const Tensor&, float) { moe_not_built(); }

}  // namespace nb::cuda

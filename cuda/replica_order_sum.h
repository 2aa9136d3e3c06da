// The adds of the replica gradient sum on the GPU (pipeline/transport/replica_sum.h), for the NCCL replica sum
// (pipeline/transport/nccl_replica_sum.cpp), which runs them on its own stream rather than the compute stream:
//
//   sum[i] = ((0 + parts[0][i]) + parts[1][i]) + ... + parts[D-1][i]
//
// f32, each add rounded (__fadd_rn: no contraction), so the bits are those of the CPU's sum in the same order.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

namespace nb::cuda {

// Writes into `sum` (n floats on the device) the sum of `parts` (each n floats on the device) in their order,
// queued on `stream`; returns at once.
void sum_in_order_async(float* sum, const std::vector<const float*>& parts, int64_t n, cudaStream_t stream);

}  // namespace nb::cuda

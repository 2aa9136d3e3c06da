// The bf16 GEMM rate of this GPU through the same cuBLASLt path as linear_forward (for `nobubble bench gpu`).
#pragma once

#include <cstdint>

#include "cuda/cuda_ops.h"

namespace nb::cuda {

// TFLOP/s (2 n^3 flops per product) of an n x n x n GEMM, bf16 inputs and output, f32 accumulation, run as
// CudaOps::linear_forward on random-valued operands: best of `reps` timed with CUDA events after 3 warm-up
// calls. Synchronises the stream.
double measure_bf16_gemm_tflops(CudaOps& ops, int n, int reps);

// GPU memory in use (total - free, cudaMemGetInfo), all processes (defined in cuda/synchronize.cu).
int64_t device_memory_used_bytes();

}  // namespace nb::cuda

// Turning CUDA / cuBLAS failures into nb::RuntimeError with the error's name and where it happened.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <string>

#include "src/core/error.h"

namespace nb::cuda {

// "file.cu:123" for error messages (every library's error check uses it: CUDA, cuBLAS, cuDNN, cuSOLVER).
std::string source_location(const char* file, int line);
[[noreturn]] void throw_cuda_error(cudaError_t err, const char* what, const char* file, int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* what, const char* file, int line);

}  // namespace nb::cuda

#define CUDA_CHECK(call)                                                                       \
    do {                                                                                       \
        cudaError_t nb_err_ = (call);                                                          \
        if (nb_err_ != cudaSuccess) ::nb::cuda::throw_cuda_error(nb_err_, #call, __FILE__, __LINE__); \
    } while (0)

// After a kernel launch: launch-configuration errors surface here, execution errors at the next sync.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

#define CUBLAS_CHECK(call)                                                                              \
    do {                                                                                                \
        cublasStatus_t nb_st_ = (call);                                                                 \
        if (nb_st_ != CUBLAS_STATUS_SUCCESS) ::nb::cuda::throw_cublas_error(nb_st_, #call, __FILE__, __LINE__); \
    } while (0)

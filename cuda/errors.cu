// CUDA / cuBLAS failures as nb::RuntimeError: "<what> failed: <error name> (<code>): <description> at file:line".
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <string>

#include "cuda/cuda_check.h"

namespace nb::cuda {

namespace {

const char* cublas_status_name(cublasStatus_t s) {
    switch (s) {
        case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
        case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
        case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
        case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
        case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
        case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
        case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
        case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
        case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
        case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
        default: return "unknown cuBLAS status";
    }
}

}  // namespace

std::string source_location(const char* file, int line) {
    const char* name = file;  // the file name without its directories
    for (const char* p = file; *p; ++p)
        if (*p == '/') name = p + 1;
    return std::string(name) + ":" + std::to_string(line);
}

void throw_cuda_error(cudaError_t err, const char* what, const char* file, int line) {
    // Clear a non-sticky error so a caller that catches and continues does not see it again; sticky errors
    // (an illegal address in a kernel) poison the context and stay, which is what they should do.
    cudaGetLastError();
    std::string msg = std::string("CUDA error: ") + what + " failed: " + cudaGetErrorName(err) + " (" +
                      std::to_string(static_cast<int>(err)) + "): " + cudaGetErrorString(err) + " at " +
                      source_location(file, line);
    throw RuntimeError(msg);
}

void throw_cublas_error(cublasStatus_t status, const char* what, const char* file, int line) {
    std::string msg = std::string("cuBLAS error: ") + what + " failed: " + cublas_status_name(status) + " (" +
                      std::to_string(static_cast<int>(status)) + ") at " + source_location(file, line);
    throw RuntimeError(msg);
}

}  // namespace nb::cuda

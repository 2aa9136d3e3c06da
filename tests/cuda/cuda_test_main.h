// main() for a CUDA test binary: include this exactly once per tests/cuda/test_*.cpp.
//
// Where no GPU is usable (cudaGetDeviceCount fails: 35 no driver, 34 stub, 100 no device; or reports 0) it
// prints "SKIP: no CUDA GPU (<error>)" and exits 77, which ctest reports as skipped (SKIP_RETURN_CODE 77 in
// tests/CMakeLists.txt). Otherwise it runs the file's doctest cases (doctest's command-line flags work, e.g.
// -tc="linear*") and returns doctest's result.
#pragma once

#ifndef DOCTEST_CONFIG_IMPLEMENT
#define DOCTEST_CONFIG_IMPLEMENT
#endif
#include <doctest/doctest.h>

#include <cuda_runtime.h>

#include <cstdio>
#include <string>

int main(int argc, char** argv) {
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count <= 0) {
        const std::string why = err != cudaSuccess
                                    ? std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err)
                                    : std::string("no CUDA device found");
        cudaGetLastError();  // clear the sticky error
        std::printf("SKIP: no CUDA GPU (%s)\n", why.c_str());
        std::fflush(stdout);
        return 77;
    }
    doctest::Context context(argc, argv);
    return context.run();
}

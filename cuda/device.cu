// CUDA device discovery: how many GPUs this process can use, and why not when it cannot.
//
// Without a driver cudaGetDeviceCount fails (35 = insufficient driver, 34 = stub library, 100 = no device);
// every failure and a count of 0 mean "no GPU", and the CUDA error is kept for the message.
#include <cuda_runtime.h>

#include "cuda/device.h"

namespace nb::cuda {

DeviceQuery query_devices() {
    DeviceQuery q;
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
        q.error = std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err);
        cudaGetLastError();  // clear the sticky error
        return q;
    }
    for (int i = 0; i < count; ++i) {
        cudaDeviceProp prop{};
        if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
        q.devices.push_back({i, prop.name, prop.major * 10 + prop.minor, static_cast<int64_t>(prop.totalGlobalMem),
                             prop.multiProcessorCount});
    }
    if (q.devices.empty()) q.error = "no CUDA device found";
    return q;
}

}  // namespace nb::cuda

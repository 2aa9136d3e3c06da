// Prints how many CUDA GPUs this process may use: 0 when there are none, whatever the reason (cudaGetDeviceCount
// fails with 35, cudaErrorInsufficientDriver, where there is no libcuda; 34 with the stub libcuda; a host with a
// driver and no device would give 100). For the shell tests that need several GPUs (tests/cuda/test_nccl_transport.sh):
// it honours CUDA_VISIBLE_DEVICES as nobubble does, which nvidia-smi would not.
#include <cuda_runtime.h>

#include <cstdio>

int main() {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
    std::printf("%d\n", count);
    return 0;
}

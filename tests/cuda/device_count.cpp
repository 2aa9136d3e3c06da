// Prints how many CUDA GPUs this process may use: 0 when there are none, whatever the reason (no driver, a stub
// driver, no device; see NOTES). For the shell tests that need several GPUs (tests/cuda/test_nccl_transport.sh):
// it honours CUDA_VISIBLE_DEVICES as nobubble does, which nvidia-smi would not.
#include <cuda_runtime.h>

#include <cstdio>

int main() {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
    std::printf("%d\n", count);
    return 0;
}

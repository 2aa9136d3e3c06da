// Exits 77 (ctest: skipped) where no GPU is usable; on a GPU machine checks the query reports it.
#include <cstdio>

#include "cuda/device.h"

int main() {
    const nb::cuda::DeviceQuery q = nb::cuda::query_devices();
    if (q.devices.empty()) {
        std::printf("SKIP: no CUDA GPU here (%s)\n", q.error.c_str());
        return 77;
    }
    int failures = 0;
    for (const auto& d : q.devices) {
        std::printf("device %d: %s, sm_%d, %.1f GiB, %d SMs\n", d.index, d.name.c_str(), d.compute_capability,
                    static_cast<double>(d.memory_bytes) / (1 << 30), d.multiprocessors);
        if (d.memory_bytes <= 0 || d.multiprocessors <= 0 || d.compute_capability < 50) ++failures;
    }
    if (!q.error.empty()) ++failures;
    std::printf("%d passed, %d failed\n", failures == 0 ? 1 : 0, failures == 0 ? 0 : 1);
    return failures == 0 ? 0 : 1;
}

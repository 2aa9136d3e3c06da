#include "src/run/backend.h"

#include <fmt/format.h>

#include "src/cpu/cpu_ops.h"
#include "src/core/error.h"
#ifdef NOBUBBLE_HAVE_CUDA
#include "cuda/cuda_ops.h"
#endif

namespace nb {

Device parse_device(const std::string& name) { return kDevices.parse(name); }

std::unique_ptr<Ops> make_ops(Device device) {
    if (device == Device::cpu) return std::make_unique<CpuOps>();
#ifdef NOBUBBLE_HAVE_CUDA
    return cuda::make_cuda_ops();
#else
    throw RuntimeError("--device cuda: this nobubble was built without CUDA (configure with -DNOBUBBLE_CUDA=ON)");
#endif
}

}  // namespace nb

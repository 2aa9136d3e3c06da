#include "pipeline/stage/state_hash.h"

#include "model/weights_hash.h"

namespace nb {

std::string stages_sha256(const std::vector<std::vector<Tensor>>& per_stage) {
    TensorSet all;
    for (const auto& stage : per_stage)
        for (const Tensor& t : stage) all.tensors.push_back(t.to(Device::cpu));
    return weights_sha256(all);
}

}  // namespace nb

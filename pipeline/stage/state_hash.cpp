#include "pipeline/stage/state_hash.h"

#include <stdexcept>

#include <fmt/format.h>

#include "model/weights_hash.h"

namespace nb {

std::string stages_sha256(const std::vector<std::vector<Tensor>>& per_stage) {
    TensorSet all;
    for (const auto& stage : per_stage)
        for (const Tensor& t : stage) all.tensors.push_back(t.to(Device::cpu));
    return weights_sha256(all);
}

std::string stages_weights_sha256(std::vector<std::vector<Tensor>> per_stage, bool tied) {
    if (tied && per_stage.size() > 1) {
        const std::string matrix = stages_sha256({{per_stage.front().at(0)}});
        const std::string copy = stages_sha256({{per_stage.back().at(0)}});
        if (copy != matrix)
            throw std::logic_error(fmt::format("the tied embedding's copies differ at the end: the first stage's "
                                               "sha256 {}, the last stage's {}", matrix, copy));
        per_stage.back().erase(per_stage.back().begin());
    }
    return stages_sha256(per_stage);
}

}  // namespace nb

#include "optim/optimizer_state.h"

#include <stdexcept>

#include <fmt/format.h>


namespace nb {

std::vector<std::pair<std::string, Tensor*>> OptimizerState::named() {
    std::vector<std::pair<std::string, Tensor*>> out;
    for (Piece& piece : pieces_)
        for (size_t i = 0; i < piece.tensors.size(); ++i)
            if (piece.tensors[i].defined()) out.emplace_back(piece.prefix + "." + piece.names[i], &piece.tensors[i]);
    return out;
}

void StatefulOptimizer::restore_steps_taken(int64_t steps) {
    if (steps < 0) throw std::logic_error(fmt::format("{}: restore_steps_taken({}): negative", name(), steps));
    steps_ = steps;
}

void check_step_arguments(const char* optimizer, const ParamLayout& layout, const TensorSet& weights,
                          const TensorSet& grads) {
    if (weights.size() != layout.size() || grads.size() != layout.size())
        throw std::logic_error(fmt::format("{}::step: layout has {} params, weights {}, grads {}", optimizer,
                                           layout.size(), weights.size(), grads.size()));
    for (int i = 0; i < layout.size(); ++i)
        if (weights[i].shape() != layout[i].shape || grads[i].shape() != layout[i].shape)
            throw std::logic_error(fmt::format("{}::step: {} expects shape {}, got weight {} grad {}", optimizer,
                                               layout[i].name, shape_string(layout[i].shape),
                                               shape_string(weights[i].shape()), shape_string(grads[i].shape())));
}

}  // namespace nb

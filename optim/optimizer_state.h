// OptimizerState: the named state tensors of an optimizer (moments, momentum buffers, previous gradients), kept
// so that every optimizer lists them the same way for hashing and for the checkpoints to come.
//
// Each piece of state is a prefix ("exp_avg") and a tensor per parameter it applies to; state_tensors() lists
// them piece by piece, each in layout order, named "<prefix>.<param name>".
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "model/params.h"
#include "optim/optimizer.h"
#include "src/core/tensor.h"

namespace nb {

class OptimizerState {
public:
    // A new piece of state: f32 zeros shaped like the parameters of `layout` for which `applies(i)` is true
    // (the others get an undefined tensor and are not listed). Returns its index for at().
    template <typename Predicate>
    int add(const std::string& prefix, const ParamLayout& layout, Device device, Predicate applies) {
        Piece piece{prefix, {}, {}};
        for (int i = 0; i < layout.size(); ++i) {
            piece.tensors.push_back(applies(i) ? Tensor::zeros(layout[i].shape, DType::f32, device) : Tensor());
            piece.names.push_back(layout[i].name);
        }
        pieces_.push_back(std::move(piece));
        return static_cast<int>(pieces_.size()) - 1;
    }
    int add_for_all(const std::string& prefix, const ParamLayout& layout, Device device) {
        return add(prefix, layout, device, [](int) { return true; });
    }

    // The bytes add() allocates for one piece, known before it does: an optimizer's static state_bytes sums
    // these over the pieces its constructor adds (the up-front memory check, pipeline/stage/stage_memory.h).
    template <typename Predicate>
    static int64_t piece_bytes(const ParamLayout& layout, Predicate applies) {
        int64_t numel = 0;
        for (int i = 0; i < layout.size(); ++i)
            if (applies(i)) numel += shape_numel(layout[i].shape);
        return numel * static_cast<int64_t>(dtype_bytes(DType::f32));
    }
    static int64_t piece_bytes_for_all(const ParamLayout& layout) {
        return piece_bytes(layout, [](int) { return true; });
    }

    Tensor& at(int piece, int param) {
        return pieces_.at(static_cast<size_t>(piece)).tensors.at(static_cast<size_t>(param));
    }
    std::vector<std::pair<std::string, Tensor*>> named();

private:
    struct Piece {
        std::string prefix;
        std::vector<Tensor> tensors;
        std::vector<std::string> names;
    };
    std::vector<Piece> pieces_;
};

// What the optimizers built on OptimizerState share (Lion, Adan, MARS, Muon): the state itself, listed by
// state_tensors(), and the count of steps taken. A subclass adds its pieces in its constructor and counts
// steps_ in step().
class StatefulOptimizer : public Optimizer {
public:
    int64_t steps_taken() const override { return steps_; }
    void restore_steps_taken(int64_t steps) override;
    std::vector<std::pair<std::string, Tensor*>> state_tensors() override { return state_.named(); }

protected:
    OptimizerState state_;
    int64_t steps_ = 0;
};

// std::logic_error unless `weights` and `grads` follow `layout` (a different layout is a programming error).
void check_step_arguments(const char* optimizer, const ParamLayout& layout, const TensorSet& weights,
                          const TensorSet& grads);

}  // namespace nb

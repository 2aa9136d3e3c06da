#include "model/weight_grads.h"

#include <set>
#include <stdexcept>

#include "model/params.h"

namespace nb {

void run_weight_grad(Ops& ops, const TensorSet& weights, TensorSet& grads, const WeightGradOp& op) {
    Tensor no_dx;  // undefined: the input half computed it already
    switch (op.kind) {
        case WeightGradOp::Kind::linear:
            ops.linear_backward(no_dx, grads[op.params.at(0)], op.dy, op.x, weights[op.params.at(0)]);
            return;
        case WeightGradOp::Kind::rmsnorm_gain:
            ops.rmsnorm_backward(no_dx, grads[op.params.at(0)], op.dy, op.x, weights[op.params.at(0)], op.aux);
            return;
        case WeightGradOp::Kind::embedding:
            ops.embedding_backward(grads[op.params.at(0)], op.x, op.dy);
            return;
        case WeightGradOp::Kind::grouped_linear: {
            std::vector<Tensor*> dw;
            std::vector<const Tensor*> w;
            for (int p : op.params) {
                dw.push_back(&grads[p]);
                w.push_back(&weights[p]);
            }
            ops.moe_grouped_linear_backward(no_dx, dw, op.dy, op.x, w, op.aux);
            return;
        }
        case WeightGradOp::Kind::expert_load:
            ops.moe_expert_load_accumulate(grads[op.params.at(0)], op.aux);
            return;
    }
    throw std::logic_error("run_weight_grad: unknown kind");
}

size_t held_bytes(const std::vector<WeightGradOp>& ops) {
    std::set<const void*> seen;
    size_t n = 0;
    for (const WeightGradOp& op : ops)
        for (const Tensor* t : {&op.dy, &op.x, &op.aux})
            if (t->defined() && seen.insert(t->data()).second) n += t->bytes();
    return n;
}

void WeightGrads::add(WeightGradOp op) {
    if (deferred_)
        deferred_->push_back(std::move(op));
    else
        run_weight_grad(ops_, weights_, grads_, op);
}

void WeightGrads::linear_backward(Tensor& dx, int param, const Tensor& dy, const Tensor& x) {
    Tensor no_dw;
    ops_.linear_backward(dx, no_dw, dy, x, weights_[param]);
    add({WeightGradOp::Kind::linear, {param}, dy, x, {}});
}

void WeightGrads::rmsnorm_backward(Tensor& dx, int param, const Tensor& dy, const Tensor& x, const Tensor& rstd) {
    Tensor no_dgain;
    ops_.rmsnorm_backward(dx, no_dgain, dy, x, weights_[param], rstd);
    add({WeightGradOp::Kind::rmsnorm_gain, {param}, dy, x, rstd});
}

void WeightGrads::embedding(int param, const Tensor& tokens, const Tensor& dout) {
    add({WeightGradOp::Kind::embedding, {param}, dout, tokens, {}});
}

void WeightGrads::grouped_linear_backward(Tensor& dx, std::vector<int> params, const Tensor& dy, const Tensor& x,
                                          const Tensor& expert_offsets) {
    std::vector<const Tensor*> w;
    for (int p : params) w.push_back(&weights_[p]);
    ops_.moe_grouped_linear_backward(dx, {}, dy, x, w, expert_offsets);
    add({WeightGradOp::Kind::grouped_linear, std::move(params), dy, x, expert_offsets});
}

void WeightGrads::expert_load(int param, const Tensor& expert_offsets) {
    add({WeightGradOp::Kind::expert_load, {param}, {}, {}, expert_offsets});
}

}  // namespace nb

// The shape contracts of the MoE layer ops (src/ops/ops.h, LayerOps; declared in src/ops/layer_checks.h). As the
// other layer checks: shapes only, never data, std::invalid_argument naming the op and what it got.
#include <stdexcept>
#include <string>

#include <fmt/format.h>

#include "src/ops/layer_checks.h"

namespace nb {

namespace {

bool is_2d(const Tensor& t, int64_t rows, int64_t cols) { return t.shape() == Shape{rows, cols}; }
bool is_1d(const Tensor& t, int64_t n) { return t.shape() == Shape{n}; }

[[noreturn]] void fail(const char* op, const std::string& expected, const std::string& got) {
    throw std::invalid_argument(fmt::format("{}: expected {}; got {}", op, expected, got));
}

std::string shapes(std::initializer_list<std::pair<const char*, const Tensor*>> named) {
    std::string s;
    for (const auto& [name, t] : named) {
        if (!s.empty()) s += ", ";
        s += fmt::format("{} {}", name, t->defined() ? shape_string(t->shape()) : "undefined");
    }
    return s;
}

MoeRouterDims router_dims(const char* op, const Tensor& probs, const Tensor& topk_expert, const Tensor& topk_gate,
                          const Tensor& logits) {
    const bool ok = probs.rank() == 2 && probs.dim(1) > 0 && logits.numel() == probs.numel() && logits.rank() >= 1 &&
                    logits.dim(-1) == probs.dim(1) && topk_expert.rank() == 2 &&
                    topk_expert.dim(0) == probs.dim(0) && topk_expert.dim(1) >= 1 &&
                    topk_expert.dim(1) <= probs.dim(1) && topk_gate.shape() == topk_expert.shape();
    if (!ok)
        fail(op, "logits/probs [N, E] with E > 0, topk_expert/topk_gate [N, k] with 1 <= k <= E",
             shapes({{"probs", &probs}, {"logits", &logits}, {"topk_expert", &topk_expert}, {"topk_gate", &topk_gate}}));
    return {probs.dim(0), probs.dim(1), topk_expert.dim(1)};
}

MoeRowDims row_dims(const char* op, const Tensor& tokens, const Tensor& pairs, const Tensor& map) {
    bool ok = tokens.rank() == 2 && pairs.rank() == 2 && tokens.dim(1) == pairs.dim(1) && map.rank() == 1 &&
              map.dim(0) == pairs.dim(0);
    const int64_t n = ok ? tokens.dim(0) : 0, r = ok ? pairs.dim(0) : 0;
    ok = ok && (n == 0 ? r == 0 : r % n == 0 && r > 0);
    if (!ok)
        fail(op, "x [N, d], the permuted rows [R, d] and the map [R] with R = N k, k >= 1",
             shapes({{"x", &tokens}, {"rows", &pairs}, {"map", &map}}));
    return {n, n == 0 ? 0 : r / n, tokens.dim(1)};
}

}  // namespace

MoeRouterDims check_moe_router_forward(const Tensor& probs, const Tensor& topk_expert, const Tensor& topk_gate,
                                       const Tensor& logits, const Tensor& expert_bias) {
    const MoeRouterDims d = router_dims("moe_router_forward", probs, topk_expert, topk_gate, logits);
    if (expert_bias.defined() && !is_1d(expert_bias, d.e))
        fail("moe_router_forward", fmt::format("expert_bias undefined or [{}]", d.e),
             shapes({{"expert_bias", &expert_bias}}));
    return d;
}

MoeRouterDims check_moe_router_backward(const Tensor& dlogits, const Tensor& dprobs, const Tensor& dgate,
                                        const Tensor& probs, const Tensor& topk_expert, const Tensor& topk_gate) {
    const MoeRouterDims d = router_dims("moe_router_backward", probs, topk_expert, topk_gate, dlogits);
    if ((dprobs.defined() && dprobs.shape() != probs.shape()) || dgate.shape() != topk_gate.shape())
        fail("moe_router_backward", "dprobs undefined or shaped like probs, dgate like topk_gate",
             shapes({{"probs", &probs}, {"dprobs", &dprobs}, {"topk_gate", &topk_gate}, {"dgate", &dgate}}));
    return d;
}

MoeRouterDims check_moe_aux_loss_forward(const Tensor& loss, const Tensor& probs, const Tensor& expert_offsets) {
    if (loss.numel() != 1 || probs.rank() != 2 || probs.dim(1) == 0 || !is_1d(expert_offsets, probs.dim(1) + 1))
        fail("moe_aux_loss_forward", "loss [1], probs [N, E] with E > 0, expert_offsets [E + 1]",
             shapes({{"loss", &loss}, {"probs", &probs}, {"expert_offsets", &expert_offsets}}));
    return {probs.dim(0), probs.dim(1), 0};
}

MoeRouterDims check_moe_aux_loss_backward(const Tensor& dprobs, const Tensor& expert_offsets) {
    if (dprobs.rank() != 2 || dprobs.dim(1) == 0 || !is_1d(expert_offsets, dprobs.dim(1) + 1))
        fail("moe_aux_loss_backward", "dprobs [N, E] with E > 0, expert_offsets [E + 1]",
             shapes({{"dprobs", &dprobs}, {"expert_offsets", &expert_offsets}}));
    return {dprobs.dim(0), dprobs.dim(1), 0};
}

MoeRouterDims check_moe_dispatch_plan(const Tensor& pair_of_row, const Tensor& row_of_pair,
                                      const Tensor& expert_offsets, const Tensor& topk_expert) {
    const bool ok = topk_expert.rank() == 2 && topk_expert.dim(1) >= 1 && expert_offsets.rank() == 1 &&
                    expert_offsets.dim(0) - 1 >= topk_expert.dim(1) &&
                    is_1d(pair_of_row, topk_expert.numel()) && is_1d(row_of_pair, topk_expert.numel());
    if (!ok)
        fail("moe_dispatch_plan", "topk_expert [N, k], pair_of_row and row_of_pair [N k], expert_offsets [E + 1], E >= k",
             shapes({{"topk_expert", &topk_expert}, {"pair_of_row", &pair_of_row}, {"row_of_pair", &row_of_pair},
                     {"expert_offsets", &expert_offsets}}));
    return {topk_expert.dim(0), expert_offsets.dim(0) - 1, topk_expert.dim(1)};
}

MoeRowDims check_moe_permute_forward(const Tensor& xp, const Tensor& x, const Tensor& pair_of_row) {
    return row_dims("moe_permute_forward", x, xp, pair_of_row);
}

MoeRowDims check_moe_permute_backward(const Tensor& dx, const Tensor& dxp, const Tensor& row_of_pair) {
    return row_dims("moe_permute_backward", dx, dxp, row_of_pair);
}

MoeRowDims check_moe_combine_forward(const Tensor& y, const Tensor& expert_out, const Tensor& topk_gate,
                                     const Tensor& row_of_pair) {
    const MoeRowDims d = row_dims("moe_combine_forward", y, expert_out, row_of_pair);
    if (!is_2d(topk_gate, d.n, d.k))
        fail("moe_combine_forward", fmt::format("topk_gate [{}, {}]", d.n, d.k), shapes({{"topk_gate", &topk_gate}}));
    return d;
}

MoeRowDims check_moe_combine_backward(const Tensor& dexpert_out, const Tensor& dgate, const Tensor& dy,
                                      const Tensor& expert_out, const Tensor& topk_gate, const Tensor& row_of_pair) {
    const MoeRowDims d = row_dims("moe_combine_backward", dy, expert_out, row_of_pair);
    if (!is_2d(topk_gate, d.n, d.k) || dgate.shape() != topk_gate.shape() || dexpert_out.shape() != expert_out.shape())
        fail("moe_combine_backward", "topk_gate/dgate [N, k], dexpert_out shaped like expert_out",
             shapes({{"topk_gate", &topk_gate}, {"dgate", &dgate}, {"expert_out", &expert_out},
                     {"dexpert_out", &dexpert_out}}));
    return d;
}

LinearDims check_moe_grouped_linear_forward(const Tensor& y, const Tensor& x, const std::vector<const Tensor*>& w,
                                            const Tensor& expert_offsets) {
    bool ok = expert_offsets.rank() == 1 && expert_offsets.dim(0) >= 2 &&
              static_cast<int64_t>(w.size()) == expert_offsets.dim(0) - 1 && x.rank() == 2 && y.rank() == 2 &&
              x.dim(0) == y.dim(0) && w[0] != nullptr && w[0]->rank() == 2;
    for (size_t e = 0; ok && e < w.size(); ++e)
        ok = w[e] != nullptr && w[e]->shape() == Shape{y.dim(1), x.dim(1)};
    if (!ok)
        fail("moe_grouped_linear_forward",
             "x [R, in], y [R, out], expert_offsets [E + 1] with E >= 1, and E weights [out, in]",
             shapes({{"x", &x}, {"y", &y}, {"expert_offsets", &expert_offsets}}) + fmt::format(", {} weights", w.size()));
    return {x.dim(0), x.dim(1), y.dim(1)};
}

LinearDims check_moe_grouped_linear_backward(const Tensor& dx, const std::vector<Tensor*>& dw, const Tensor& dy,
                                             const Tensor& x, const std::vector<const Tensor*>& w,
                                             const Tensor& expert_offsets) {
    const LinearDims d = check_moe_grouped_linear_forward(dy, x, w, expert_offsets);
    bool ok = (!dx.defined() || dx.shape() == x.shape()) && (dw.empty() || dw.size() == w.size());
    for (size_t e = 0; ok && e < dw.size(); ++e) ok = dw[e] != nullptr && dw[e]->shape() == w[e]->shape();
    if (!ok)
        fail("moe_grouped_linear_backward", "dx undefined or shaped like x, no gradients or one shaped like each weight",
             shapes({{"x", &x}, {"dx", &dx}}) + fmt::format(", {} weights, {} gradients", w.size(), dw.size()));
    return d;
}

void check_moe_offsets_partition(const char* op, const int32_t* host_offsets, int64_t experts, int64_t rows) {
    bool ok = host_offsets[0] == 0 && host_offsets[experts] == rows;
    for (int64_t e = 0; ok && e < experts; ++e) ok = host_offsets[e] <= host_offsets[e + 1];
    if (!ok)
        throw std::invalid_argument(fmt::format("{}: expert_offsets are not a partition of the {} rows", op, rows));
}

int64_t check_moe_expert_load_accumulate(const Tensor& expert_load, const Tensor& expert_offsets) {
    const int64_t e = expert_load.numel();
    if (expert_load.rank() != 1 || expert_load.dtype() != DType::f32 || !is_1d(expert_offsets, e + 1))
        fail("moe_expert_load_accumulate", "expert_load f32 [E], expert_offsets [E + 1]",
             shapes({{"expert_load", &expert_load}, {"expert_offsets", &expert_offsets}}));
    return e;
}

int64_t check_moe_expert_bias_update(const Tensor& expert_bias, const Tensor& expert_load) {
    const int64_t e = expert_bias.numel();
    if (expert_bias.rank() != 1 || e == 0 || expert_bias.dtype() != DType::f32 || expert_load.dtype() != DType::f32 ||
        !is_1d(expert_load, e))
        fail("moe_expert_bias_update", "expert_bias and expert_load f32 [E], E > 0",
             shapes({{"expert_bias", &expert_bias}, {"expert_load", &expert_load}}));
    return e;
}

}  // namespace nb

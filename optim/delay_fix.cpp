#include "optim/delay_fix.h"

#include <cmath>

#include <fmt/format.h>

#include "src/core/error.h"
#include "src/ops/ops.h"

namespace nb {

DelayFixKind parse_delay_fix_kind(std::string_view name) { return kDelayFixKinds.parse(name); }

std::string_view delay_fix_kind_name(DelayFixKind kind) { return kDelayFixKinds.name(kind); }

void DelayFixConfig::validate() const {
    if (!(std::isfinite(taylor_lambda) && taylor_lambda >= 0.0f))
        throw UsageError(fmt::format("--taylor-lambda {} must be >= 0", taylor_lambda));
}

DelayFix::DelayFix(const DelayFixConfig& config, const ParamLayout& layout, Device device)
    : kind_(config.kind), taylor_lambda_(config.taylor_lambda) {
    config.validate();
    for (const ParamInfo& p : layout.params()) names_.push_back(p.name);
    if (kind_ == DelayFixKind::ef) previous_update_ = TensorSet::zeros(layout, DType::f32, device);
}

int64_t DelayFix::state_bytes(const DelayFixConfig& config, const ParamLayout& layout) {
    if (config.kind != DelayFixKind::ef) return 0;
    return layout.total_numel() * static_cast<int64_t>(dtype_bytes(DType::f32));
}

void DelayFix::compensate(Ops& ops, const ParamLayout& layout, const TensorSet& master, TensorSet& grads,
                          const TensorSet* stale) {
    if (kind_ != DelayFixKind::taylor || stale == nullptr) return;
    for (int i = 0; i < layout.size(); ++i) ops.delay_compensate(grads[i], master[i], (*stale)[i], taylor_lambda_);
}

void DelayFix::update(Ops& ops, Optimizer& optimizer, const ParamLayout& layout, TensorSet& master, TensorSet& grads,
                      float lr, bool asynchronous) {
    if (kind_ != DelayFixKind::ef) {
        optimizer.step(ops, layout, master, grads, lr);
        return;
    }
    // ef: W' = W_t - u_t from the optimizer; u_t = W_t - W'; W_{t+1} = W' - u_t + u_{t-1} on asynchronous steps.
    std::vector<Tensor> before;
    for (const Tensor& w : master.tensors) before.push_back(ops.copy_of(w));
    optimizer.step(ops, layout, master, grads, lr);
    for (int i = 0; i < layout.size(); ++i) {
        Tensor& update = before[static_cast<size_t>(i)];  // becomes -u_t = W' - W_t
        ops.scale_inplace(update, -1.0f);
        ops.add_inplace(update, master[i]);
        if (asynchronous) {
            ops.add_inplace(master[i], update);              // W' - u_t
            ops.add_inplace(master[i], previous_update_[i]);  // + u_{t-1}
        }
        ops.scale_inplace(update, -1.0f);  // u_t, kept for the next step
        previous_update_[i] = std::move(update);
    }
}

std::vector<std::pair<std::string, Tensor*>> DelayFix::state_tensors() {
    std::vector<std::pair<std::string, Tensor*>> out;
    for (int i = 0; i < previous_update_.size(); ++i)
        out.emplace_back("ef_update." + names_[static_cast<size_t>(i)], &previous_update_[i]);
    return out;
}

}  // namespace nb

#include "optim/delay_fix.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "src/core/error.h"
#include "src/ops/ops.h"

namespace nb {

DelayFixKind parse_delay_fix_kind(std::string_view name) { return kDelayFixKinds.parse(name); }

std::string_view delay_fix_kind_name(DelayFixKind kind) { return kDelayFixKinds.name(kind); }

std::string DelayFixConfig::name() const {
    if (!predict) return std::string(delay_fix_kind_name(kind));
    if (kind == DelayFixKind::none) return "predict";
    return fmt::format("{},predict", delay_fix_kind_name(kind));
}

void DelayFixConfig::validate() const {
    if (kind == DelayFixKind::predict) throw std::logic_error("DelayFixConfig: predict is a flag, not a kind");
    if (!(std::isfinite(taylor_lambda) && taylor_lambda >= 0.0f))
        throw UsageError(fmt::format("--taylor-lambda {} must be >= 0", taylor_lambda));
    if (!(std::isfinite(predict_lambda) && predict_lambda >= 0.0f))
        throw UsageError(fmt::format("--predict-lambda {} must be >= 0", predict_lambda));
}

DelayFixConfig parse_delay_fixes(std::string_view list, DelayFixConfig into) {
    std::vector<DelayFixKind> named;
    for (size_t begin = 0;;) {
        const size_t comma = list.find(',', begin);
        const DelayFixKind k = parse_delay_fix_kind(list.substr(begin, comma - begin));
        if (std::find(named.begin(), named.end(), k) != named.end())
            throw UsageError(fmt::format("--delay-fix '{}' names {} twice", list, delay_fix_kind_name(k)));
        named.push_back(k);
        if (comma == std::string_view::npos) break;
        begin = comma + 1;
    }
    into.kind = DelayFixKind::none;
    into.predict = false;
    for (const DelayFixKind k : named) {
        if (k == DelayFixKind::none && named.size() > 1)
            throw UsageError(fmt::format("--delay-fix '{}': none stands alone", list));
        if (k == DelayFixKind::predict) {
            into.predict = true;
        } else if (k != DelayFixKind::none) {
            if (into.kind != DelayFixKind::none)
                throw UsageError(fmt::format("--delay-fix '{}': ef and taylor both correct the step; choose one", list));
            into.kind = k;
        }
    }
    return into;
}

DelayFix::DelayFix(const DelayFixConfig& config, const ParamLayout& layout, Device device)
    : kind_(config.kind),
      predict_(config.predict),
      taylor_lambda_(config.taylor_lambda),
      predict_lambda_(config.predict_lambda) {
    config.validate();
    for (const ParamInfo& p : layout.params()) names_.push_back(p.name);
    if (keeps_last_update()) previous_update_ = TensorSet::zeros(layout, DType::f32, device);
}

int64_t DelayFix::state_bytes(const DelayFixConfig& config, const ParamLayout& layout) {
    if (config.kind != DelayFixKind::ef && !config.predict) return 0;
    return layout.total_numel() * static_cast<int64_t>(dtype_bytes(DType::f32));
}

void DelayFix::compensate(Ops& ops, const ParamLayout& layout, const TensorSet& master, TensorSet& grads,
                          const TensorSet* stale) {
    if (kind_ != DelayFixKind::taylor || stale == nullptr) return;
    for (int i = 0; i < layout.size(); ++i) ops.delay_compensate(grads[i], master[i], (*stale)[i], taylor_lambda_);
}

void DelayFix::update(Ops& ops, Optimizer& optimizer, const ParamLayout& layout, TensorSet& master, TensorSet& grads,
                      float lr, bool asynchronous) {
    if (!keeps_last_update()) {
        optimizer.step(ops, layout, master, grads, lr);
        return;
    }
    // W' = W_t - u_t from the optimizer; u_t = W_t - W', kept (ef's u_{t-1} next step, predict's newest update).
    // ef: W_{t+1} = W' - u_t + u_{t-1} on asynchronous steps; otherwise W_{t+1} = W'.
    std::vector<Tensor> before;
    for (const Tensor& w : master.tensors) before.push_back(ops.copy_of(w));
    optimizer.step(ops, layout, master, grads, lr);
    for (int i = 0; i < layout.size(); ++i) {
        Tensor& update = before[static_cast<size_t>(i)];  // becomes -u_t = W' - W_t
        ops.scale_inplace(update, -1.0f);
        ops.add_inplace(update, master[i]);
        if (kind_ == DelayFixKind::ef && asynchronous) {
            ops.add_inplace(master[i], update);              // W' - u_t
            ops.add_inplace(master[i], previous_update_[i]);  // + u_{t-1}
        }
        ops.scale_inplace(update, -1.0f);  // u_t, kept for the next step
        previous_update_[i] = std::move(update);
    }
}

// W_hat = W + (-lambda u): the product rounded to f32 first, then the sum (what `w - lam * u` does in torch).
void DelayFix::predict_weights(Ops& ops, const TensorSet& master, TensorSet& out) const {
    if (!predict_) throw std::logic_error("DelayFix::predict_weights without --delay-fix predict");
    for (int i = 0; i < master.size(); ++i) {
        Tensor shift = ops.copy_of(previous_update_[i]);
        ops.scale_inplace(shift, -predict_lambda_);
        Tensor predicted = ops.copy_of(master[i]);
        ops.add_inplace(predicted, shift);
        ops.cast(out[i], predicted);
    }
}

std::vector<std::pair<std::string, Tensor*>> DelayFix::state_tensors() {
    std::vector<std::pair<std::string, Tensor*>> out;
    const std::string prefix = kind_ == DelayFixKind::ef ? "ef_update." : "last_update.";
    for (int i = 0; i < previous_update_.size(); ++i)
        out.emplace_back(prefix + names_[static_cast<size_t>(i)], &previous_update_[i]);
    return out;
}

}  // namespace nb

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
    if (!(std::isfinite(lookahead_gamma) && lookahead_gamma >= 0.0f && lookahead_gamma < 1.0f))
        throw UsageError(fmt::format("--lookahead-gamma {} must be in [0, 1)", lookahead_gamma));
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
                throw UsageError(fmt::format("--delay-fix '{}': {} and {} both correct the step; choose one", list,
                                             delay_fix_kind_name(into.kind), delay_fix_kind_name(k)));
            into.kind = k;
        }
    }
    if (into.kind == DelayFixKind::lookahead && into.predict)
        throw UsageError(fmt::format("--delay-fix '{}': lookahead moves the forwards to its own look-ahead point; "
                                     "predict does not combine with it",
                                     list));
    return into;
}

DelayFix::DelayFix(const DelayFixConfig& config, const ParamLayout& layout, Device device) : config_(config) {
    config.validate();
    for (const ParamInfo& p : layout.params()) names_.push_back(p.name);
    if (config_.keeps_last_update()) previous_update_ = TensorSet::zeros(layout, DType::f32, device);
}

int64_t DelayFix::state_bytes(const DelayFixConfig& config, const ParamLayout& layout) {
    if (!config.keeps_last_update()) return 0;
    return layout.total_numel() * static_cast<int64_t>(dtype_bytes(DType::f32));
}

void DelayFix::compensate(Ops& ops, const ParamLayout& layout, const TensorSet& master, TensorSet& grads,
                          const TensorSet* stale) {
    if (config_.kind != DelayFixKind::taylor || stale == nullptr) return;
    for (int i = 0; i < layout.size(); ++i)
        ops.delay_compensate(grads[i], master[i], (*stale)[i], config_.taylor_lambda);
}

void DelayFix::update(Ops& ops, Optimizer& optimizer, const ParamLayout& layout, TensorSet& master, TensorSet& grads,
                      float lr, bool asynchronous) {
    if (!config_.keeps_last_update()) {
        optimizer.step(ops, layout, master, grads, lr);
        return;
    }
    const bool look_ahead = config_.kind == DelayFixKind::lookahead && asynchronous;
    // W' = W_t - u_t from the optimizer; u_t = W_t - W', kept (ef's u_{t-1} next step, predict's newest update).
    // ef: W_{t+1} = W' - u_t + u_{t-1} on asynchronous steps; otherwise W_{t+1} = W'.
    std::vector<Tensor> before;
    for (const Tensor& w : master.tensors) before.push_back(ops.copy_of(w));
    optimizer.step(ops, layout, master, grads, lr);
    for (int i = 0; i < layout.size(); ++i) {
        Tensor& w_t = before[static_cast<size_t>(i)];
        // Becomes -u_t = W' - W_t, in W_t's own storage unless lookahead still needs W_t.
        Tensor update = look_ahead ? ops.copy_of(w_t) : std::move(w_t);
        ops.scale_inplace(update, -1.0f);
        ops.add_inplace(update, master[i]);
        if (config_.kind == DelayFixKind::ef && asynchronous) {
            ops.add_inplace(master[i], update);              // W' - u_t
            ops.add_inplace(master[i], previous_update_[i]);  // + u_{t-1}
        }
        ops.scale_inplace(update, -1.0f);  // u_t
        if (look_ahead) {
            look_ahead_step(ops, w_t, update, previous_update_[i], master[i]);
            continue;
        }
        previous_update_[i] = std::move(update);  // u_t: the next step's u_{t-1}, or lookahead's applied d_{t+1}
    }
}

// lookahead: d_{t+1} = gamma d_t + (1 - gamma) u_t (each product rounded to f32, then the sum),
// W_{t+1} = W_t - d_{t+1}.
void DelayFix::look_ahead_step(Ops& ops, const Tensor& w_t, const Tensor& u_t, Tensor& d, Tensor& master) const {
    const float gamma = config_.lookahead_gamma;
    ops.scale_inplace(d, gamma);
    Tensor fresh = ops.copy_of(u_t);
    ops.scale_inplace(fresh, 1.0f - gamma);
    ops.add_inplace(d, fresh);
    Tensor step = ops.copy_of(d);
    ops.scale_inplace(step, -1.0f);
    ops.cast(master, w_t);
    ops.add_inplace(master, step);
}

// W_hat = W + (-lambda u): the product rounded to f32 first, then the sum (what `w - lam * u` does in torch).
void DelayFix::predict_weights(Ops& ops, const TensorSet& master, TensorSet& out, int64_t updates_ahead) const {
    if (!predicts()) throw std::logic_error("DelayFix::predict_weights without --delay-fix predict or lookahead");
    const bool lookahead = config_.kind == DelayFixKind::lookahead;
    if (updates_ahead < 0 || (lookahead && updates_ahead != 1))
        throw std::logic_error(fmt::format("DelayFix::predict_weights: {} updates ahead", updates_ahead));
    // k u_last stands for the k updates in flight; k = 1 (2bw) leaves lambda's bits as they are.
    const float lambda =
        lookahead ? config_.lookahead_gamma : config_.predict_lambda * static_cast<float>(updates_ahead);
    for (int i = 0; i < master.size(); ++i) {
        Tensor shift = ops.copy_of(previous_update_[i]);
        ops.scale_inplace(shift, -lambda);
        Tensor predicted = ops.copy_of(master[i]);
        ops.add_inplace(predicted, shift);
        ops.cast(out[i], predicted);
    }
}

std::vector<std::pair<std::string, Tensor*>> DelayFix::state_tensors() {
    std::vector<std::pair<std::string, Tensor*>> out;
    const std::string prefix = config_.kind == DelayFixKind::ef          ? "ef_update."
                               : config_.kind == DelayFixKind::lookahead ? "lookahead_step."
                                                                         : "last_update.";
    for (int i = 0; i < previous_update_.size(); ++i)
        out.emplace_back(prefix + names_[static_cast<size_t>(i)], &previous_update_[i]);
    return out;
}

}  // namespace nb

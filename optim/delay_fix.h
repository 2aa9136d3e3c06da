// DelayFix: the mitigations of a stale gradient (--delay-fix, docs/DESIGN.md section 2 "Mitigations"), applied by each
// stage to its own update, locally. t counts the stage's optimizer steps; u_t is what the optimizer alone would
// subtract (W_t - u_t is its plain result, weight decay included).
//
//   none      W_{t+1} = W_t - u_t
//   ef        update-level Error Feedback: W_{t+1} = W_t - 2 u_t + u_{t-1}, u_{-1} = 0. One buffer holds u_{t-1}:
//             the previous step's update, whichever kind of step made it (a --sync-start step's update feeds
//             the first asynchronous step).
//   taylor    DC-ASGD's first-order compensation of the gradient before the optimizer sees it:
//             g <- g + lambda * g (.) g (.) (W_t - W_stale), W_stale the version the gradient was computed at.
//   predict   weight prediction (SpecTrain, PipeMare): the forwards and backwards of an asynchronous step t run on
//             W_hat_{t-1} = W_{t-1} - lambda * u_{t-2} instead of W_{t-1}: the newest known update as the estimate
//             of the one in flight (u_{t-1}, not yet made when step t's forwards start), so the gradient is taken
//             nearer to W_t, where it is applied. u_{-1} = 0; a version that a synchronous step also uses (the
//             first asynchronous step's W_{K-1} after --sync-start K) is not predicted. One buffer holds the last
//             update, as ef's; the prediction itself is the stage's weight versions' (predict_weights). The
//             master weights and the update rule are unchanged: only where the gradient is taken moves.
//   lookahead a Nesterov-style momentum look-ahead for a one-step delay, derived here (Ajanthan et al. 2025 apply
//             NAG's idea to asynchronous pipelines; the rule below is ours, not taken from the paper). The update
//             is a momentum in weight space, d_{t+1} = gamma d_t + (1 - gamma) u_t and W_{t+1} = W_t - d_{t+1}
//             (the step keeps its size: a constant u gives d = u), and the forwards and backwards of the
//             asynchronous step t run on the look-ahead point W_hat_{t-1} = W_{t-1} - gamma d_{t-1}. Then
//             W_t = W_hat_{t-1} - (1 - gamma) u_{t-1}: the gradient is taken (1 - gamma) u away from where it is
//             applied instead of a whole step, the part of the update in flight that is already known (its
//             momentum) being looked ahead. gamma = --lookahead-gamma; d_{t+1} = u_t on synchronous steps, so
//             the first asynchronous step continues from their steps; d_0 = 0. One buffer holds d.
//
// --delay-fix takes a comma list: one of ef, taylor or lookahead, predict, or both (ef,predict; taylor,predict;
// lookahead brings its own look-ahead point and takes no predict).
// ef, taylor and predict act on asynchronous steps only; a synchronous step (gpipe, 1f1b, and the --sync-start /
// --sync-cooldown steps of 2bw) updates plainly. All are defined for 2bw (the one-step delay of the paper);
// make_pipeline_setup / the reference reject them with other schedules.
//
// u_t is measured, not re-derived: the optimizer updates W_t in place to W' = W_t - u_t, and u_t = W_t - W' (the
// subtraction of two nearby floats, exact whenever W' is within a factor of two of W_t, as Sterbenz's lemma
// says). Then W_{t+1} = W' - u_t + u_{t-1}. Written with the backend's ops, so it runs on every backend.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "model/params.h"
#include "optim/optimizer.h"
#include "src/core/name_table.h"
#include "src/core/tensor.h"

namespace nb {

// The names --delay-fix's list takes. `predict` is never a DelayFixConfig::kind: it is the flag beside it.
enum class DelayFixKind { none, ef, taylor, predict, lookahead };
inline constexpr auto kDelayFixKinds = name_table<DelayFixKind>("--delay-fix", {
    {"none", DelayFixKind::none},
    {"ef", DelayFixKind::ef, "update-level error feedback"},
    {"taylor", DelayFixKind::taylor, "DC-ASGD"},
    {"predict", DelayFixKind::predict, "weight prediction; combines with ef or taylor: ef,predict"},
    {"lookahead", DelayFixKind::lookahead, "Nesterov-style momentum look-ahead"},
});
// kDelayFixKinds.parse and .name.
DelayFixKind parse_delay_fix_kind(std::string_view name);
std::string_view delay_fix_kind_name(DelayFixKind kind);

struct DelayFixConfig {
    DelayFixKind kind = DelayFixKind::none;  // the step's correction: none, ef, taylor or lookahead
    bool predict = false;                    // weight prediction of the stale versions
    float taylor_lambda = 0.04f;             // --taylor-lambda (DC-ASGD's lambda)
    float predict_lambda = 1.0f;             // --predict-lambda
    float lookahead_gamma = 0.5f;            // --lookahead-gamma

    bool any() const { return kind != DelayFixKind::none || predict; }
    // Whether the asynchronous steps run on a predicted version (predict, or lookahead's look-ahead point).
    bool predicts() const { return predict || kind == DelayFixKind::lookahead; }
    // Whether a buffer keeps the last step's update: ef's u_{t-1}, predict's u, lookahead's d.
    bool keeps_last_update() const { return kind == DelayFixKind::ef || predicts(); }
    // The list as --delay-fix writes it: "none", "ef", "ef,predict", "predict".
    std::string name() const;
    // nb::UsageError: a lambda negative or not finite.
    void validate() const;
};
// --delay-fix's comma list ("ef", "ef,predict", "none"): nb::UsageError for an unknown name, a repeated one, none
// beside another, or ef with taylor (both correct the same step: choose one).
DelayFixConfig parse_delay_fixes(std::string_view list, DelayFixConfig into = {});

class DelayFix {
public:
    DelayFix(const DelayFixConfig& config, const ParamLayout& layout, Device device);
    // The bytes of state the constructor allocates for `layout` (ef's previous update), before it does.
    static int64_t state_bytes(const DelayFixConfig& config, const ParamLayout& layout);

    DelayFixKind kind() const { return config_.kind; }
    bool predicts() const { return config_.predicts(); }

    // One optimizer step of `master` with the fix. `asynchronous`: this step's gradient came from a stale
    // version (false for synchronous steps: plain update). `stale`: those stale weights (the compute copy the
    // gradient was computed with), or nullptr when the gradient was computed at W_t itself; only taylor reads
    // it. `grads` may be changed (taylor compensates them in place).
    void step(Ops& ops, Optimizer& optimizer, const ParamLayout& layout, TensorSet& master, TensorSet& grads, float lr,
              bool asynchronous, const TensorSet* stale) {
        if (asynchronous) compensate(ops, layout, master, grads, stale);
        update(ops, optimizer, layout, master, grads, lr, asynchronous);
    }
    // The two halves of step(), for a caller that must let go of the stale weights before the update (a pipeline
    // stage holds no more weight versions than its schedule needs): taylor's compensation of `grads` (nothing for
    // none and ef, or when `stale` is nullptr), then the optimizer's update with ef's correction.
    void compensate(Ops& ops, const ParamLayout& layout, const TensorSet& master, TensorSet& grads,
                    const TensorSet* stale);
    void update(Ops& ops, Optimizer& optimizer, const ParamLayout& layout, TensorSet& master, TensorSet& grads,
                float lr, bool asynchronous);

    // predict: out = W - (lambda k) * u, u the last update (u_{t-1} after step t-1, when `master` holds W_t) and
    // k = `updates_ahead`, the updates made while the version is in use (2bw 1; pipedream's stage s of p: p-1-s,
    // SpecTrain's rule); lookahead: out = W - gamma * d, d its last applied step (2bw only: k must be 1).
    // `out` holds tensors of the compute dtype, apart from `master`'s. std::logic_error unless predicts(), or for
    // lookahead with k != 1.
    void predict_weights(Ops& ops, const TensorSet& master, TensorSet& out, int64_t updates_ahead) const;

    // ef: "ef_update.<param>" (u_{t-1}) for every parameter, in layout order; predict alone: "last_update.<param>"
    // (the same u_{t-1}); lookahead: "lookahead_step.<param>" (d); none and taylor: nothing.
    std::vector<std::pair<std::string, Tensor*>> state_tensors();

private:
    DelayFixConfig config_;
    std::vector<std::string> names_;
    TensorSet previous_update_;  // ef, predict: u_{t-1}; lookahead: d_t

    void look_ahead_step(Ops& ops, const Tensor& w_t, const Tensor& u_t, Tensor& d, Tensor& master) const;
};

}  // namespace nb

"""Oracle for the delay fixes (optim/delay_fix.cpp, --delay-fix none | ef | taylor | predict and the lists ef,predict,
taylor,predict) around AdamW, replayed in torch.

    /usr/bin/python3 tests/oracle/test_optim_delay_fix.py --dump <dump_optimizer> --nobubble <ignored> --workdir <dir>

dump_optimizer --mode delay_fix trains W on the quadratic f(W) = 0.5 * sum(a * (W - c)^2) (per parameter; a > 0 and
c fixed random, written to the dump), gradient a * (W - c), with our AdamW (make_optimizer "adamw") under
DelayFix::step. Steps k < --sync-steps are synchronous: the gradient is taken at W_k. The others simulate 2BW: the
gradient of step k is taken at W_{max(k-1, 0)} (stale), and DelayFix::step gets asynchronous = true and the stale
weights (none at k = 0).

The rules, written out below with torch.optim.AdamW (betas (0.9, 0.95), eps 1e-8, weight decay 0.1 and none on
norm gains: param groups) as the inner optimizer. u_k = W_k - AdamW_step(W_k, g_k), the optimizer's own update
(computed here by stepping torch's AdamW on a copy of W_k):
  none:    W_{k+1} = W_k - u_k                                      (every step)
  ef:      W_{k+1} = W_k - 2 u_k + u_{k-1}, u_{-1} = 0                (asynchronous steps; update-level Error
           Feedback. Synchronous steps update plainly, and their u_k still feeds the next step's u_{k-1})
  taylor:  g~ = g + lambda * g * g * (W_k - W_stale), then a plain AdamW step with g~   (DC-ASGD's first-order
           compensation; asynchronous steps with stale weights only)
  predict: the asynchronous step k takes its gradient at W_hat_{k-1} = W_{k-1} - lambda_p * u_{k-2} instead of
           W_{k-1} (weight prediction: the newest known update as the estimate of the one in flight), where
           k - 1 >= 1 and step k - 1 was asynchronous too (else at W_{k-1}: the version a synchronous step used);
           the update rule is unchanged, and taylor's W_stale is then W_hat_{k-1}. With ef: both.
  lookahead: (a momentum look-ahead, derived in optim/delay_fix.h) on asynchronous steps
           d_{k+1} = gamma * d_k + (1 - gamma) * u_k and W_{k+1} = W_k - d_{k+1}; on synchronous ones
           d_{k+1} = u_k and the plain step; d_0 = 0. The asynchronous step k takes its gradient at
           W_{k-1} - gamma * d_{k-1} where k - 1 >= 1 and step k - 1 was asynchronous too (else at W_{k-1}).

Runs, 12 steps each, lr peak 1e-2 (warm-up + cosine):
  none_sync            all steps synchronous: must equal plain AdamW with fresh gradients
  none_async           2BW-stale gradients, no fix: plain AdamW on stale gradients
  ef, ef_sync_start    ef from step 0; ef after 3 synchronous steps
  taylor, taylor_sync_start   lambda 20 (AdamW normalises most of the compensation away: lambda 0.5 moves the
                       weights by only ~5e-5 of their size here, 20 by ~6e-3) from step 0; after 3 synchronous steps
  predict, predict_sync_start, predict_half (lambda_p 0.5), ef_predict, ef_predict_sync_start, taylor_predict
  lookahead (gamma 0.5), lookahead_sync_start (gamma 0.5), lookahead_high (gamma 0.9)
  none_delay3, predict_delay3 (lambda_p 0.5)   dump_optimizer --delay 3: a pipedream stage 3 updates behind, the
                       gradient of step k at W_{max(k-3, 0)}; predict makes W_v (v >= 1) as W_v - 3 lambda_p u_{v-1}
Compared: final weights, AdamW's exp_avg.* / exp_avg_sq.*, ef's ef_update.* or predict's last_update.* (u of the
last step), lookahead's lookahead_step.* (d); tolerance 1e-5.
Each fix must also move the weights measurably away from the unfixed run (else this test could not tell).
"""
import torch

import optim_oracle as oo

LR = 1e-2
BETAS = (0.9, 0.95)
EPS = 1e-8
WD = 0.1
STEPS = 12


def gradient(a, c, w):
    """a * (W - c), in float32, in the order dump_optimizer computes it."""
    return [ai * (wi - ci) for ai, wi, ci in zip(a, w, c)]


def replay(case, kind, lam, sync_steps, predict=False, predict_lambda=1.0, delay=1):
    a = oo.read_set(case.file(case.m["quad_a"]), case.params)
    c = oo.read_set(case.file(case.m["quad_c"]), case.params)
    w = oo.clones(case.weights_init)
    used = [oo.clones(w)]  # used[v]: W_v as the steps use it (its prediction where one is made)
    params = [t.clone() for t in w]  # torch AdamW's parameters; each step loads W_k into them
    r = oo.lr32
    opt = torch.optim.AdamW(
        [{"params": [p for i, p in enumerate(params) if case.decays(i)], "weight_decay": r(WD)},
         {"params": [p for i, p in enumerate(params) if not case.decays(i)], "weight_decay": 0.0}],
        lr=case.lrs[0], betas=(r(BETAS[0]), r(BETAS[1])), eps=r(EPS), foreach=False)
    u_prev = [torch.zeros_like(t) for t in w]
    for k in range(case.steps):
        asynchronous = k >= sync_steps
        stale = used[max(k - delay, 0)]  # W_{k-delay} (at k < delay: W_0, the gradient's own weights at k = 0)
        g = gradient(a, c, stale if asynchronous else w)
        if kind == "taylor" and asynchronous:
            g = [gi + lam * gi * gi * (wi - si) for gi, wi, si in zip(g, w, stale)]
        for p, wi, gi in zip(params, w, g):
            p.copy_(wi)
            p.grad = gi
        for group in opt.param_groups:
            group["lr"] = case.lrs[k]
        opt.step()
        stepped = [p.detach().clone() for p in params]  # W_k - u_k
        u = [wi - si for wi, si in zip(w, stepped)]
        if kind == "ef" and asynchronous:
            new_w = [wi - 2 * ui + upi for wi, ui, upi in zip(w, u, u_prev)]
        elif kind == "lookahead" and asynchronous:  # u_prev holds d_k
            u = [predict_lambda * di + (1 - predict_lambda) * ui for di, ui in zip(u_prev, u)]  # d_{k+1}
            new_w = [wi - di for wi, di in zip(w, u)]
        else:
            new_w = stepped  # (lookahead: d_{k+1} = u_k)
        u_prev = u
        w = new_w
        if (predict or kind == "lookahead") and k + 1 >= 1 and k + 1 >= sync_steps:
            # W_hat_{k+1} = W_{k+1} - (lambda_p delay) u_k (lookahead: - gamma d_{k+1}): the delay updates in
            # flight while W_{k+1} is in use, each estimated by the newest known one (SpecTrain)
            used.append([wi - predict_lambda * delay * ui for wi, ui in zip(w, u)])
        else:
            used.append(w)
    state = {}
    for i, (name, p) in enumerate(zip(case.names, params)):
        state[f"exp_avg.{name}"] = opt.state[p]["exp_avg"]
        state[f"exp_avg_sq.{name}"] = opt.state[p]["exp_avg_sq"]
        if kind == "ef":
            state[f"ef_update.{name}"] = u_prev[i]
        elif kind == "lookahead":
            state[f"lookahead_step.{name}"] = u_prev[i]
        elif predict:
            state[f"last_update.{name}"] = u_prev[i]
    return w, state


def main():
    args = oo.parse_args(__doc__)
    checker = oo.Checker()
    # label, kind (none | ef | taylor), taylor's lambda, synchronous steps, predict, predict's lambda[, delay]
    runs = [
        ("none_sync", "none", 0.04, STEPS, False, 1.0),
        ("none_async", "none", 0.04, 0, False, 1.0),
        ("ef", "ef", 0.04, 0, False, 1.0),
        ("ef_sync_start", "ef", 0.04, 3, False, 1.0),
        ("taylor", "taylor", 20.0, 0, False, 1.0),
        ("taylor_sync_start", "taylor", 20.0, 3, False, 1.0),
        ("predict", "none", 0.04, 0, True, 1.0),
        ("predict_sync_start", "none", 0.04, 3, True, 1.0),
        ("predict_half", "none", 0.04, 0, True, 0.5),
        ("ef_predict", "ef", 0.04, 0, True, 1.0),
        ("ef_predict_sync_start", "ef", 0.04, 3, True, 1.0),
        ("taylor_predict", "taylor", 20.0, 0, True, 1.0),
        ("lookahead", "lookahead", 0.04, 0, False, 0.5),
        ("lookahead_sync_start", "lookahead", 0.04, 3, False, 0.5),
        ("lookahead_high", "lookahead", 0.04, 0, False, 0.9),
        ("none_delay3", "none", 0.04, 0, False, 1.0, 3),
        ("predict_delay3", "none", 0.04, 0, True, 0.5, 3),
    ]
    unfixed = {}
    for label, kind, lam, sync_steps, predict, predict_lambda, *rest in runs:
        delay = rest[0] if rest else 1
        fix = f"{kind},predict" if predict and kind != "none" else ("predict" if predict else kind)
        flags = ["--mode", "delay_fix", "--optimizer", "adamw", "--lr", LR, "--steps", STEPS,
                 "--beta1", BETAS[0], "--beta2", BETAS[1], "--eps", EPS, "--weight-decay", WD,
                 "--delay-fix", fix, "--taylor-lambda", lam, "--predict-lambda", predict_lambda,
                 "--lookahead-gamma", predict_lambda if kind == "lookahead" else 0.5,
                 "--sync-steps", sync_steps, "--delay", delay]
        case = oo.Case(args.dump, f"{args.workdir}/{label}", flags)
        # (lookahead's gamma rides in the predict_lambda column)
        ref_weights, ref_state = replay(case, kind, lam, sync_steps, predict, predict_lambda, delay)
        checker.compare_case(label, case, ref_weights, ref_state)
        # How far the fix moves the weights from the same run without it (the oracle's own two runs), and
        # predict beside ef or taylor from that rule alone.
        if fix == "none":
            unfixed[(sync_steps, delay)] = ref_weights
            continue
        bases = [("none", replay(case, "none", lam, sync_steps, delay=delay)[0])]
        if predict and kind != "none":
            bases.append((kind, replay(case, kind, lam, sync_steps)[0]))
        for base_name, base in bases:
            effect = max(oo.relative_error(a, b) for a, b in zip(ref_weights, base))
            ok = effect > 100 * checker.tolerance
            checker.record(label, f"effect of {fix} vs {base_name} (must be > {100 * checker.tolerance:g})",
                           effect, ok)
    # The synchronous and the stale runs must differ too, or the 2BW simulation would not be exercised.
    for label, stale in (("none_async", (0, 1)), ("none_delay3", (0, 3))):
        effect = max(oo.relative_error(a, b) for a, b in zip(unfixed[(STEPS, 1)], unfixed[stale]))
        checker.record(label, f"stale vs fresh gradients (must be > {100 * checker.tolerance:g})", effect,
                       effect > 100 * checker.tolerance)
    checker.finish()


if __name__ == "__main__":
    main()

"""Oracle for MARS: our optimizer (optim/mars.cpp via make_optimizer) against the published rule, replayed in torch.

    /usr/bin/python3 tests/oracle/test_optim_mars.py --dump <dump_optimizer> --nobubble <ignored> --workdir <dir>

The rule is AGI-Arena/MARS, MARS/optimizers/mars.py (update_fn and MARS.step with mars_type "mars-adamw",
is_approx True, optimize_1d False, amsgrad False), written out again below. Per parameter, step t from 1:
  2-D parameters (embedding, hidden matrices, head), last_grad = 0 at first:
      c = g + gamma * (b1 / (1 - b1)) * (g - last_grad);  if ||c||_F > 1: c = c / ||c||_F
      m = b1 m + (1 - b1) c;  v = b2 v + (1 - b2) c^2
      denom = (sqrt(v) / sqrt(1 - b2^t) + eps) * (1 - b1^t)
      p += -lr * (p * wd + m / denom);  last_grad = g
  1-D parameters: AdamW with lr_1d = lr * (lr_1d / lr_peak), betas_1d, weight_decay_1d and the same eps:
      p += -lr_1d * (p * wd_1d + m / ((sqrt(v) / sqrt(1 - b2^t) + eps) * (1 - b1^t)))
  Defaults: lr 3e-3, betas (0.95, 0.99), eps 1e-8, wd 0, gamma 0.025; lr_1d 3e-3, betas_1d (0.9, 0.95),
  weight_decay_1d 0.1.
Our flags: --adam-lr is lr_1d, --adam-beta1/2 are betas_1d, --adam-weight-decay is weight_decay_1d.

Our convention (not in the reference): no weight decay on norm gains, for the 1-D AdamW too (all our 1-D
parameters are norm gains, so weight_decay_1d is never exercised here).

Three runs, 12 steps each, lr peak 3e-3: "defaults" (--adam-lr 3e-3 --weight-decay 0.1 besides --lr), "custom"
(every flag set) and "tiny" (--weight-decay 0.1 only, gradients scaled by 1e-6 so that eps matters). The
gradients' norms vary so that the clipping of c triggers on some steps and not on others (checked; in "tiny" it
never does). Compared: final weights, exp_avg.*, exp_avg_sq.*, last_grad.*; tolerance 1e-5.
"""
import math

import torch

import optim_oracle as oo

PUBLISHED = dict(betas=(0.95, 0.99), eps=1e-8, weight_decay=0.0, gamma=0.025,
                 lr_1d=3e-3, betas_1d=(0.9, 0.95), weight_decay_1d=0.1)


def update_fn(p, grad, exp_avg, exp_avg_sq, lr, wd, beta1, beta2, last_grad, eps, step, gamma, is_grad_2d,
              lr_1d_factor, betas_1d, weight_decay_1d, clip_count):
    """mars.py's update_fn for mars_type "mars-adamw", amsgrad False, optimize_1d False."""
    if is_grad_2d:
        c_t = (grad - last_grad).mul(gamma * (beta1 / (1. - beta1))).add(grad)
        c_t_norm = torch.norm(c_t)
        if c_t_norm > 1.:
            c_t = c_t / c_t_norm
            clip_count[0] += 1
        clip_count[1] += 1
        exp_avg.mul_(beta1).add_(c_t, alpha=1. - beta1)
        exp_avg_sq.mul_(beta2).addcmul_(c_t, c_t, value=1. - beta2)
        bias_correction1 = 1.0 - beta1 ** step
        bias_correction2 = 1.0 - beta2 ** step
        denom = exp_avg_sq.sqrt().mul(1 / math.sqrt(bias_correction2)).add(eps).mul(bias_correction1)
        real_update_tmp = -lr * torch.mul(p.data, wd).add(exp_avg.div(denom))
        p.data.add_(real_update_tmp)
    else:
        beta1_1d, beta2_1d = betas_1d
        exp_avg.mul_(beta1_1d).add_(grad, alpha=1. - beta1_1d)
        exp_avg_sq.mul_(beta2_1d).addcmul_(grad, grad, value=1. - beta2_1d)
        bias_correction1 = 1.0 - beta1_1d ** step
        bias_correction2 = 1.0 - beta2_1d ** step
        denom = exp_avg_sq.sqrt().mul(1 / math.sqrt(bias_correction2)).add(eps).mul(bias_correction1)
        real_update_tmp = -lr * lr_1d_factor * torch.mul(p.data, weight_decay_1d).add(exp_avg.div(denom))
        p.data.add_(real_update_tmp)


def replay(case, hp, clip_count):
    weights = oo.clones(case.weights_init)
    state = {}
    lr_1d_factor = hp["lr_1d"] / case.peak_lr  # mars.py: self.lr_1d_factor = lr_1d / lr (the constructor's lr)
    for k in range(case.steps):
        for i, (p, g) in enumerate(zip(weights, case.grads[k])):
            name = case.names[i]
            is_2d = g.dim() == 2
            m = state.setdefault(f"exp_avg.{name}", torch.zeros_like(p))
            v = state.setdefault(f"exp_avg_sq.{name}", torch.zeros_like(p))
            last = state.get(f"last_grad.{name}", torch.zeros_like(p))
            update_fn(p, g, m, v, case.lrs[k], hp["weight_decay"] if case.decays(i) else 0.0, *hp["betas"], last,
                      hp["eps"], k + 1, hp["gamma"], is_2d, lr_1d_factor, hp["betas_1d"],
                      hp["weight_decay_1d"] if case.decays(i) else 0.0, clip_count)
            if is_2d:  # is_approx: state['last_grad'] = grad (the reference keeps one for 1-D too, unused there)
                state[f"last_grad.{name}"] = g.clone()
    return weights, state


def main():
    args = oo.parse_args(__doc__)
    checker = oo.Checker()
    r = oo.lr32
    runs = [
        ("defaults", ["--lr", 3e-3, "--adam-lr", 3e-3, "--weight-decay", 0.1],
         dict(PUBLISHED, lr_1d=r(3e-3), weight_decay=r(0.1))),
        ("custom", ["--lr", 3e-3, "--beta1", 0.9, "--beta2", 0.95, "--eps", 1e-7, "--weight-decay", 0.05,
                    "--gamma", 0.05, "--adam-lr", 1e-3, "--adam-beta1", 0.8, "--adam-beta2", 0.9,
                    "--adam-weight-decay", 0.2],
         dict(betas=(r(0.9), r(0.95)), eps=r(1e-7), weight_decay=r(0.05), gamma=r(0.05), lr_1d=r(1e-3),
              betas_1d=(r(0.8), r(0.9)), weight_decay_1d=r(0.2))),
        ("tiny", ["--lr", 3e-3, "--weight-decay", 0.1, "--grad-scale", 1e-6], dict(PUBLISHED, weight_decay=r(0.1))),
    ]
    for label, flags, hp in runs:
        case = oo.Case(args.dump, f"{args.workdir}/{label}", ["--optimizer", "mars", "--steps", 12] + flags)
        clip_count = [0, 0]
        ref_weights, ref_state = replay(case, hp, clip_count)
        checker.note(label, f"c_t clipped in {clip_count[0]} of {clip_count[1]} 2-D updates")
        if label != "tiny" and (clip_count[0] == 0 or clip_count[0] == clip_count[1]):
            checker.fail(label, "the clipping of c_t must trigger on some updates and not on others")
        checker.compare_case(label, case, ref_weights, ref_state)
    checker.finish()


if __name__ == "__main__":
    main()

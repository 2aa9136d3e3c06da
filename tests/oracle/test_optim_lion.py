"""Oracle for Lion: our optimizer (optim/lion.cpp via make_optimizer) against the published rule, replayed in torch.

    /usr/bin/python3 tests/oracle/test_optim_lion.py --dump <dump_optimizer> --nobubble <ignored> --workdir <dir>

The rule is lucidrains/lion-pytorch, lion_pytorch/lion_pytorch.py (update_fn; decoupled_weight_decay False),
written out again below:

    p.mul_(1 - lr * wd)
    update = sign(exp_avg * beta1 + g * (1 - beta1));  p.add_(update, alpha=-lr)
    exp_avg = exp_avg * beta2 + g * (1 - beta2)
  Defaults: betas (0.9, 0.99), wd 0.

Our convention (not in the reference): no weight decay on norm gains.

Two runs, 12 steps each, lr peak 1e-3: "defaults" (only --weight-decay 0.1 besides --lr; the betas are the
published defaults) and "custom" (--beta1 0.8 --beta2 0.95 --weight-decay 0.3). Compared: final weights and
exp_avg.*; tolerance 1e-5.
"""
import torch

import optim_oracle as oo

PUBLISHED = dict(betas=(0.9, 0.99), weight_decay=0.0)


def update_fn(p, grad, exp_avg, lr, wd, beta1, beta2):
    """lion_pytorch.py's update_fn, verbatim."""
    p.data.mul_(1. - lr * wd)
    update = exp_avg.clone().mul_(beta1).add(grad, alpha=1. - beta1).sign_()
    p.add_(update, alpha=-lr)
    exp_avg.mul_(beta2).add_(grad, alpha=1. - beta2)


def replay(case, hp):
    weights = oo.clones(case.weights_init)
    state = {}
    for k in range(case.steps):
        for i, (p, g) in enumerate(zip(weights, case.grads[k])):
            exp_avg = state.setdefault(f"exp_avg.{case.names[i]}", torch.zeros_like(p))
            wd = hp["weight_decay"] if case.decays(i) else 0.0
            update_fn(p, g, exp_avg, case.lrs[k], wd, *hp["betas"])
    return weights, state


def runs(r):
    """(label, flags, hyperparameters) of each replayed run; `r` rounds a value to float32 as the C++ side has it."""
    return [
        ("defaults", ["--lr", 1e-3, "--weight-decay", 0.1], dict(PUBLISHED, weight_decay=r(0.1))),
        ("custom", ["--lr", 1e-3, "--beta1", 0.8, "--beta2", 0.95, "--weight-decay", 0.3],
         dict(betas=(r(0.8), r(0.95)), weight_decay=r(0.3))),
    ]


if __name__ == "__main__":
    oo.main(__doc__, "lion", runs, replay)

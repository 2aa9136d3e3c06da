"""Oracle for Adan: our optimizer (optim/adan.cpp via make_optimizer) against the published rule, replayed in torch.

    /usr/bin/python3 tests/oracle/test_optim_adan.py --dump <dump_optimizer> --nobubble <ignored> --workdir <dir>

The rule is sail-sg/Adan, adan.py (Adan.step and _single_tensor_adan; max_grad_norm 0 so no clipping,
no_prox False), written out again below. Step t counts from 1; bias_correction_i = 1 - beta_i^t. At t == 1 the
previous gradient is the gradient itself (neg_pre_grad = -g), so the first difference is 0.
    diff = g - g_prev
    m = m * b1 + g * (1 - b1);  d = d * b2 + diff * (1 - b2)
    u = g + b2 * diff;  n = n * b3 + u * u * (1 - b3)
    denom = sqrt(n) / sqrt(bc3) + eps
    p.addcdiv_(m, denom, value=-lr / bc1);  p.addcdiv_(d, denom, value=-lr * b2 / bc2)
    p.div_(1 + lr * wd)
    g_prev = g
  Defaults: betas (0.98, 0.92, 0.99), eps 1e-8, wd 0.

Our conventions (not in the reference): no weight decay on norm gains; the reference keeps -g_prev
("neg_pre_grad"), we keep g_prev ("previous_grad").

Three runs, 12 steps each, lr peak 1e-2: "defaults" (--weight-decay 0.1 besides --lr) and "custom" (every flag
set; weight decay 1.0, large enough that the proximal decay p / (1 + lr wd) differs measurably from the no_prox
p * (1 - lr wd), a difference of order (lr wd)^2) and "tiny" (as defaults with gradients scaled by 1e-6, so
that the default eps matters). Compared: final weights, exp_avg.*, exp_avg_diff.*, exp_avg_sq.*, previous_grad.*; tolerance 1e-5.
"""
import math

import torch

import optim_oracle as oo

PUBLISHED = dict(betas=(0.98, 0.92, 0.99), eps=1e-8, weight_decay=0.0)


def single_tensor_adan(param, grad, exp_avg, exp_avg_sq, exp_avg_diff, neg_grad_or_diff, *, beta1, beta2, beta3,
                       bias_correction1, bias_correction2, bias_correction3_sqrt, lr, weight_decay, eps):
    """adan.py's _single_tensor_adan for one tensor, no_prox False, clip_global_grad_norm 1."""
    neg_grad_or_diff.add_(grad)
    exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)  # m_t
    exp_avg_diff.mul_(beta2).add_(neg_grad_or_diff, alpha=1 - beta2)  # diff_t
    neg_grad_or_diff.mul_(beta2).add_(grad)
    exp_avg_sq.mul_(beta3).addcmul_(neg_grad_or_diff, neg_grad_or_diff, value=1 - beta3)  # n_t
    denom = ((exp_avg_sq).sqrt() / bias_correction3_sqrt).add_(eps)
    step_size_diff = lr * beta2 / bias_correction2
    step_size = lr / bias_correction1
    param.addcdiv_(exp_avg, denom, value=-step_size)
    param.addcdiv_(exp_avg_diff, denom, value=-step_size_diff)
    param.div_(1 + lr * weight_decay)
    neg_grad_or_diff.zero_().add_(grad, alpha=-1.0)


def replay(case, hp):
    weights = oo.clones(case.weights_init)
    state = {}
    neg_pre_grad = [None] * len(weights)
    beta1, beta2, beta3 = hp["betas"]
    for k in range(case.steps):
        t = k + 1
        lr = case.lrs[k]
        for i, (p, g) in enumerate(zip(weights, case.grads[k])):
            name = case.names[i]
            m = state.setdefault(f"exp_avg.{name}", torch.zeros_like(p))
            n = state.setdefault(f"exp_avg_sq.{name}", torch.zeros_like(p))
            d = state.setdefault(f"exp_avg_diff.{name}", torch.zeros_like(p))
            if t == 1:
                neg_pre_grad[i] = g.clone().mul_(-1.0)
            single_tensor_adan(p, g, m, n, d, neg_pre_grad[i], beta1=beta1, beta2=beta2, beta3=beta3,
                               bias_correction1=1.0 - beta1 ** t, bias_correction2=1.0 - beta2 ** t,
                               bias_correction3_sqrt=math.sqrt(1.0 - beta3 ** t), lr=lr,
                               weight_decay=hp["weight_decay"] if case.decays(i) else 0.0, eps=hp["eps"])
    for i, name in enumerate(case.names):
        state[f"previous_grad.{name}"] = -neg_pre_grad[i]
    return weights, state


def runs(r):
    """(label, flags, hyperparameters) of each replayed run; `r` rounds a value to float32 as the C++ side has it."""
    return [
        ("defaults", ["--lr", 1e-2, "--weight-decay", 0.1], dict(PUBLISHED, weight_decay=r(0.1))),
        ("custom", ["--lr", 1e-2, "--beta1", 0.9, "--beta2", 0.8, "--beta3", 0.95, "--eps", 1e-6,
                    "--weight-decay", 1.0],
         dict(betas=(r(0.9), r(0.8), r(0.95)), eps=r(1e-6), weight_decay=r(1.0))),
        ("tiny", ["--lr", 1e-2, "--weight-decay", 0.1, "--grad-scale", 1e-6], dict(PUBLISHED, weight_decay=r(0.1))),
    ]


if __name__ == "__main__":
    oo.main(__doc__, "adan", runs, replay)

"""Oracle for Muon: our optimizer (optim/muon.cpp via make_optimizer) against the published rule, replayed in torch.

    /usr/bin/python3 tests/oracle/test_optim_muon.py --dump <dump_optimizer> --nobubble <ignored> --workdir <dir>

The rule is KellerJordan/Muon, muon.py (SingleDeviceMuonWithAuxAdam, zeropower_via_newtonschulz5, muon_update,
adam_update), written out again below in plain torch:

  hidden matrices (ParamKind hidden_matrix), momentum buffer B = 0 at first:
      B.lerp_(g, 1 - beta);  U = g.lerp(B, beta) if nesterov else B
      X = U (transposed when rows > cols);  X = X / (||X||_F + 1e-7)
      ns_steps times:  A = X X^T;  Bm = b A + c A A;  X = a X + Bm X      (a, b, c) = (3.4445, -4.7750, 2.0315)
      transpose back;  X *= max(1, rows / cols) ** 0.5
      p.mul_(1 - lr * wd);  p.add_(X, alpha=-lr)
  everything else (embedding, head, norm gains): AdamW (adam_update), lr_a = adam_lr * lr / peak_lr.
  Defaults: lr 0.02, momentum 0.95, nesterov True, ns_steps 5, wd 0; AdamW lr 3e-4, betas (0.9, 0.95),
  eps 1e-10, wd 0.

Deviation from the reference, on purpose: the reference runs Newton-Schulz in bfloat16 (on a GPU); we and this
oracle run it in float32.
Our conventions (not in the reference): no weight decay on norm gains; the AdamW lr follows the schedule as
adam_lr * lr_k / peak_lr.

Three runs, 12 steps each: "defaults" (only --lr 0.02 --adam-lr 3e-3 --weight-decay 0.1: every other value is
the published default, so this also checks our defaults table), "custom" (every flag set to a non-default value)
and "tiny" (gradients scaled by 1e-6 so that AdamW's eps and Newton-Schulz's 1e-7 matter; --adam-lr left at its
default too).
Compared: final weights and every state tensor (momentum_buffer.*, exp_avg.*, exp_avg_sq.*); tolerance 1e-5.
"""
import torch

import optim_oracle as oo

PUBLISHED = dict(momentum=0.95, nesterov=True, ns_steps=5, weight_decay=0.0,
                 adam_lr=3e-4, adam_betas=(0.9, 0.95), adam_eps=1e-10, adam_weight_decay=0.0)


def zeropower_via_newtonschulz5(G, steps):
    """muon.py's zeropower_via_newtonschulz5, in float32 instead of bfloat16."""
    assert G.ndim >= 2
    a, b, c = (3.4445, -4.7750, 2.0315)
    X = G.float()
    if G.size(-2) > G.size(-1):
        X = X.mT
    X = X / (X.norm(dim=(-2, -1), keepdim=True) + 1e-7)
    for _ in range(steps):
        A = X @ X.mT
        B = b * A + c * A @ A
        X = a * X + B @ X
    if G.size(-2) > G.size(-1):
        X = X.mT
    return X


def muon_update(grad, momentum, beta, ns_steps, nesterov):
    """muon.py's muon_update (grad is modified in place, as there)."""
    momentum.lerp_(grad, 1 - beta)
    update = grad.lerp_(momentum, beta) if nesterov else momentum
    update = zeropower_via_newtonschulz5(update, steps=ns_steps)
    update *= max(1, grad.size(-2) / grad.size(-1)) ** 0.5
    return update


def replay(case, hp):
    weights = oo.clones(case.weights_init)
    state = {}
    for k in range(case.steps):
        lr = case.lrs[k]
        lr_adam = hp["adam_lr"] * lr / case.peak_lr
        for i, (p, g) in enumerate(zip(weights, case.grads[k])):
            name, g = case.names[i], g.clone()
            if case.kind(i) == "hidden_matrix":
                buf = state.setdefault(f"momentum_buffer.{name}", torch.zeros_like(p))
                update = muon_update(g, buf, hp["momentum"], hp["ns_steps"], hp["nesterov"])
                wd = hp["weight_decay"] if case.decays(i) else 0.0
                p.mul_(1 - lr * wd)
                p.add_(update.reshape(p.shape), alpha=-lr)
            else:
                m = state.setdefault(f"exp_avg.{name}", torch.zeros_like(p))
                v = state.setdefault(f"exp_avg_sq.{name}", torch.zeros_like(p))
                wd = hp["adam_weight_decay"] if case.decays(i) else 0.0
                oo.adamw_published(p, g, m, v, k + 1, lr_adam, hp["adam_betas"], hp["adam_eps"], wd)
    return weights, state


def runs(r):
    """(label, flags, hyperparameters) of each replayed run; `r` rounds a value to float32 as the C++ side has it."""
    return [
        ("defaults", ["--lr", 0.02, "--adam-lr", 3e-3, "--weight-decay", 0.1],
         dict(PUBLISHED, adam_lr=r(3e-3), weight_decay=r(0.1))),
        ("custom", ["--lr", 0.02, "--momentum", 0.9, "--nesterov", "false", "--ns-steps", 4, "--weight-decay", 0.05,
                    "--adam-lr", 1e-3, "--adam-beta1", 0.8, "--adam-beta2", 0.99, "--adam-eps", 1e-8,
                    "--adam-weight-decay", 0.2],
         dict(momentum=r(0.9), nesterov=False, ns_steps=4, weight_decay=r(0.05), adam_lr=r(1e-3),
              adam_betas=(r(0.8), r(0.99)), adam_eps=r(1e-8), adam_weight_decay=r(0.2))),
        ("tiny", ["--lr", 0.02, "--weight-decay", 0.1, "--grad-scale", 1e-6], dict(PUBLISHED, weight_decay=r(0.1))),
    ]


if __name__ == "__main__":
    oo.main(__doc__, "muon", runs, replay)

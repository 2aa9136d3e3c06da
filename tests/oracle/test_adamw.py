"""Oracle for AdamW + gradient clipping + LR schedule: replay dump_adamw's ten steps with torch.

    /usr/bin/python3 tests/oracle/test_adamw.py --dump <dump_adamw> --nobubble <ignored> --workdir <dir>

dump_adamw writes the initial weights, each step's gradients (before clipping) and lr, and its final weights,
exp_avg and exp_avg_sq. Here torch.nn.utils.clip_grad_norm_(params, max_norm) and torch.optim.AdamW (two param
groups: weight decay for matrices and embeddings, none for norm gains) replay the same steps in float32.

Error per tensor: max |ours - torch| / max |torch|  (over the tensor's elements; 1e-12 floor on the
denominator). It must be <= 1e-6 for the final weights, exp_avg and exp_avg_sq of every parameter, and for
the ten pre-clipping gradient norms (|ours - torch| / |torch|, ours in double, torch's in float32).
"""
import json
import os
import subprocess
import sys

import numpy as np
import torch

from optim_oracle import parse_args, read_set, relative_error  # what the optimizer oracles share

TOLERANCE = 1e-6


def replay_in_torch(m, workdir):
    params = m["params"]
    weights = [t.clone().requires_grad_(True) for t in read_set(os.path.join(workdir, m["weights_init"]), params)]
    decay = [w for w, p in zip(weights, params) if p["weight_decay"]]
    no_decay = [w for w, p in zip(weights, params) if not p["weight_decay"]]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": m["weight_decay"]}, {"params": no_decay, "weight_decay": 0.0}],
        lr=m["lrs"][0], betas=(m["beta1"], m["beta2"]), eps=m["eps"], foreach=False)
    norms = []
    for k in range(m["steps"]):
        for w, g in zip(weights, read_set(os.path.join(workdir, m["grads"][k]), params)):
            w.grad = g
        norms.append(torch.nn.utils.clip_grad_norm_(weights, m["max_grad_norm"]).item())
        lr = float(np.float32(m["lrs"][k]))  # the float32 lr the C++ side used, as a Python float
        for group in opt.param_groups:
            group["lr"] = lr
        opt.step()
    state = [opt.state[w] for w in weights]
    return {
        "weights": [w.detach() for w in weights],
        "exp_avg": [s["exp_avg"] for s in state],
        "exp_avg_sq": [s["exp_avg_sq"] for s in state],
        "grad_norms": norms,
    }


def main():
    args = parse_args(__doc__)
    subprocess.run([args.dump, "--workdir", args.workdir], check=True)
    with open(os.path.join(args.workdir, "manifest.json")) as f:
        m = json.load(f)
    params = m["params"]

    ref = replay_in_torch(m, args.workdir)
    ours = {
        "weights": read_set(os.path.join(args.workdir, m["weights_final"]), params),
        "exp_avg": read_set(os.path.join(args.workdir, m["exp_avg_final"]), params),
        "exp_avg_sq": read_set(os.path.join(args.workdir, m["exp_avg_sq_final"]), params),
    }

    print(f"error = max|ours - torch| / max|torch| per tensor, tolerance {TOLERANCE:g}")
    passed = failed = 0

    def check(label, err):
        nonlocal passed, failed
        ok = err <= TOLERANCE
        passed += ok
        failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {label:<36} {err:.3e}")

    for kind in ("weights", "exp_avg", "exp_avg_sq"):
        for p, a, b in zip(params, ours[kind], ref[kind]):
            check(f"{kind}.{p['name']}", relative_error(a, b))

    clipped = sum(n > m["max_grad_norm"] for n in ref["grad_norms"])
    for k, (a, b) in enumerate(zip(m["grad_norms"], ref["grad_norms"])):
        check(f"grad_norm[{k}] = {b:.4f}", abs(a - b) / max(abs(b), 1e-12))
    print(f"clipping triggered on {clipped} of {m['steps']} steps")
    if clipped == 0 or clipped == m["steps"]:
        print("FAIL the gradients must be clipped on some steps and not on others")
        failed += 1

    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

"""Oracle for the expert bias (aux-loss-free balancing, DeepSeek-V3; docs/DESIGN.md section 7) over several
optimizer steps: an independent implementation in torch against our layer and StageOptimizer.

    /usr/bin/python3 tests/oracle/test_moe_bias.py --dump <dump_moe_bias> --nobubble <ignored> --workdir <dir>

dump_moe_bias runs, per case, several steps of a few microbatches each through MoeFeedForward (forward with the
bias of the weights, backward adding the loads into the bias's gradient slot) and StageOptimizer::step, and writes
per step the router's weights, the bias it selected with, each microbatch's input h, probabilities and selection,
and the summed loads; then the final bias. Here, from the same router weights and inputs only, in torch:

    p      = softmax(h Wr^T)                                  (float64; against ours, relative error <= 1e-5)
    chosen = the k largest p + b per token, best first, ties to the lower index (a stable sort), from OUR f32 p
             (so that a last-bit difference of the softmax cannot move a near tie) and THIS bias, in f32
    load_e = the (token, slot) pairs chosen for e, summed over the step's microbatches    (exact)
    b     <- b + rate sign(mean(load) - load), sign(0) = 0, in f32 from b = 0             (exact)

The bias chain here never reads ours: it starts at zero and follows the rule from the loads recomputed here, so
a wrong rule, a missing or doubled load, an optimizer that touched the bias (weight decay, AdamW's update of the
"gradient"), or a forward that selected with another version's bias all show as a mismatch. Each case also checks
what it was built for: in drift the bias decides some selection; mean_tie has experts exactly on the mean.
"""
import json
import os
import sys

import numpy as np
import torch

from case_oracle import run_cases
from test_model import read


def select(p32, bias32, k):
    """The k best experts per token by p + b in f32, best first; ties to the lower index (stable sort)."""
    scores = p32 + bias32
    return torch.sort(-scores, dim=1, stable=True).indices[:, :k]


def update(bias32, loads, rate32):
    """b + rate sign(mean - load) in f32; mean in float64 (the loads are exact counts)."""
    mean = loads.to(torch.float64).mean()
    sign = torch.sign(mean - loads.to(torch.float64)).to(torch.float32)
    return torch.where(sign != 0, bias32 + rate32 * sign, bias32)


def run_case(workdir, case, report):
    path = lambda *parts: os.path.join(workdir, case, *parts)
    with open(path("manifest.json")) as f:
        m = json.load(f)
    N, d, E, k = m["tokens"], m["hidden_size"], m["num_experts"], m["topk"]
    rate32 = torch.tensor(m["rate"], dtype=torch.float32)
    bias = torch.zeros(E, dtype=torch.float32)  # the bias is initialised to zero
    ties_seen = 0
    moved = False  # did the bias decide some selection (against the same probabilities unbiased)?
    for s in range(m["steps"]):
        step = lambda name: path(f"step{s}", name)
        ours_bias = torch.from_numpy(read(step("bias.f32"), "<f4", [E]).copy())
        report.check(case, f"step {s}: the bias selected with is the chain's", torch.equal(ours_bias, bias),
                     f"ours {ours_bias.tolist()} want {bias.tolist()}")
        router = torch.from_numpy(read(step("router.f32"), "<f4", [E, d]).copy()).to(torch.float64)
        loads = torch.zeros(E, dtype=torch.int64)
        for mb in range(m["microbatches"]):
            h = torch.from_numpy(read(step(f"mb{mb}.h.f32"), "<f4", [N, d]).copy()).to(torch.float64)
            ours_p = torch.from_numpy(read(step(f"mb{mb}.probs.f32"), "<f4", [N, E]).copy())
            ours_topk = torch.from_numpy(read(step(f"mb{mb}.topk_expert.i32"), "<i4", [N, k]).astype(np.int64))
            report.compare(case, "probs", f"step {s} mb {mb}", ours_p, torch.softmax(h @ router.T, dim=1))
            chosen = select(ours_p, bias, k)
            report.check(case, f"step {s} mb {mb}: selection", torch.equal(chosen, ours_topk))
            moved = moved or not torch.equal(chosen, select(ours_p, torch.zeros_like(bias), k))
            loads += torch.bincount(chosen.reshape(-1), minlength=E)
        ours_loads = torch.from_numpy(read(step("loads.f32"), "<f4", [E]).copy())
        report.check(case, f"step {s}: loads {loads.tolist()}", torch.equal(ours_loads.to(torch.int64), loads)
                     and torch.equal(ours_loads, loads.to(torch.float32)), f"ours {ours_loads.tolist()}")
        ties_seen += int((loads * E == loads.sum()).sum())
        bias = update(bias, loads, rate32)
    ours_final = torch.from_numpy(read(path("final_bias.f32"), "<f4", [E]).copy())
    report.check(case, "final bias (exact)", torch.equal(ours_final, bias),
                 f"ours {ours_final.tolist()} want {bias.tolist()}")
    report.compare(case, "bias", "final bias", ours_final, bias)
    if case == "drift":
        report.check(case, "the bias decided some selection (unbiased, the same p would select otherwise)", moved)
        report.check(case, "the bias is not zero at the end", bool((bias != 0).any()))
    if case == "mean_tie":
        report.check(case, "experts exactly on the mean (sign 0) every step", ties_seen == 2 * m["steps"],
                     f"{ties_seen} expert-steps on the mean")
        report.check(case, "an expert on the mean keeps a zero bias", bool((bias[2:] == 0).all()) and
                     bool((bias[:2] != 0).all()))


def main():
    return run_cases(run_case, min_cases=2)


if __name__ == "__main__":
    sys.exit(main())

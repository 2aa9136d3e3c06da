"""Oracle for the MoE feed-forward (model/moe_layer.h): an independent float64 MoE in torch against our fp32 layer.

    /usr/bin/python3 tests/oracle/test_moe_layer.py --dump <dump_moe_layer> --nobubble <ignored> --workdir <dir>

dump_moe_layer writes, per case, the layer's input h, a cotangent R, the expert bias, the weights, and what our
layer computed: its output, the aux loss, d h and every parameter gradient of L = sum(out * R) + L_aux. Here the
layer is written from docs/DESIGN.md section 7 (and Switch/GShard, DeepSeek-V3 for the bias), in float64:

    p = softmax(h Wr^T)
    chosen = the k largest p + b per token, best first, equal scores to the lower expert index (a stable sort)
    g = p[chosen]  (/ its row sum with renorm)          the bias only selects
    out = sum_j g_j SwiGLU_{chosen_j}(h) + SharedExpert(h)       SwiGLU(h) = (silu(h Wg^T) * h Wu^T) Wd^T
    L_aux = coeff E sum_i f_i P_i,  f_i = (tokens routed to i) / (N k) (a constant),  P_i = mean_n p[n, i]

torch autograd gives the gradients. Each tensor's error is ||ours - torch|| / ||torch|| (<= 1e-5; a zero reference
gradient, an expert that received no token, must be exactly zero). The selection is compared exactly, and each case
checks the routing situation it was built for (a deciding tie, an expert without tokens, one with every token,
k = E).
"""
import json
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

from case_oracle import run_cases
from test_model import read


def swiglu(x, w_gate, w_up, w_down):
    return F.linear(F.silu(F.linear(x, w_gate)) * F.linear(x, w_up), w_down)


def select(p, bias, k):
    """The k best experts per token, best first; ties to the lower index (stable sort of the negated scores)."""
    scores = p + bias
    order = torch.sort(-scores, dim=1, stable=True).indices
    return order[:, :k], scores


def moe_forward(m, params, h, bias):
    E, k, prefix = m["num_experts"], m["topk"], "layers.0.moe."
    P = lambda name: params[prefix + name]
    p = torch.softmax(F.linear(h, P("router.weight")), dim=1)
    chosen, scores = select(p.detach(), bias, k)
    gates = torch.gather(p, 1, chosen)
    if m["topk_renorm"]:
        gates = gates / gates.sum(dim=1, keepdim=True)
    out = torch.zeros_like(h)
    for j in range(k):  # slot order
        for e in range(E):
            rows = chosen[:, j] == e
            if rows.any():
                y = swiglu(h[rows], P(f"experts.{e}.w_gate"), P(f"experts.{e}.w_up"), P(f"experts.{e}.w_down"))
                out = out.index_add(0, rows.nonzero().reshape(-1), gates[rows, j:j + 1] * y)
    if m["shared_ffn_hidden_size"] > 0:
        out = out + swiglu(h, P("shared_expert.w_gate"), P("shared_expert.w_up"), P("shared_expert.w_down"))
    counts = torch.bincount(chosen.reshape(-1), minlength=E).to(torch.float64)
    f = counts / chosen.numel()
    aux = m["aux_loss_coeff"] * E * (f * p.mean(dim=0)).sum()
    return out, aux, chosen, scores, counts


def deciding_ties(scores, chosen, k):
    """Tokens where the last chosen expert's score equals that of a better-indexed-later unchosen one: the tie rule
    decided the selection."""
    n = 0
    E = scores.shape[1]
    for t in range(scores.shape[0]):
        if k == E:
            continue
        last = scores[t, chosen[t, k - 1]]
        rest = [e for e in range(E) if e not in chosen[t].tolist()]
        n += any(scores[t, e] == last for e in rest)
    return n


def run_case(workdir, case, report):
    path = lambda name: os.path.join(workdir, case, name)
    with open(path("manifest.json")) as f:
        m = json.load(f)
    N, d, E, k = m["tokens"], m["hidden_size"], m["num_experts"], m["topk"]
    report.check(case, "two passes give the same bits", m["deterministic"])
    params = {}
    for p in m["params"]:
        params[p["name"]] = torch.from_numpy(read(path(p["weight"]), "<f4", p["shape"]).astype(np.float64))
        params[p["name"]].requires_grad_(True)
    h = torch.from_numpy(read(path("h.f32"), "<f4", [N, d]).astype(np.float64)).requires_grad_(True)
    R = torch.from_numpy(read(path("R.f32"), "<f4", [N, d]).astype(np.float64))
    bias = torch.from_numpy(read(path("bias.f32"), "<f4", [E]).astype(np.float64))

    out, aux, chosen, scores, counts = moe_forward(m, params, h, bias)
    ((out * R).sum() + aux).backward()

    ours_chosen = torch.from_numpy(read(path("topk_expert.i32"), "<i4", [N, k]).astype(np.int64))
    report.check(case, "same experts chosen, in slot order", torch.equal(ours_chosen, chosen))
    offsets = read(path("expert_offsets.i32"), "<i4", [E + 1]).astype(np.int64)
    report.check(case, "expert offsets are the prefix sums of the loads",
                 offsets[0] == 0 and np.array_equal(np.diff(offsets), counts.numpy().astype(np.int64)),
                 f"{offsets.tolist()}")
    # Ties are checked in our own f32 probabilities too: the selection there is what the tie rule decided.
    ours_p = torch.from_numpy(read(path("probs.f32"), "<f4", [N, E]).astype(np.float64))
    ties_ours = deciding_ties(ours_p + bias.to(torch.float32).to(torch.float64), ours_chosen, k)
    loads = counts.tolist()
    if case == "tie":
        report.check(case, "a tie decided the selection", ties_ours > 0 and deciding_ties(scores, chosen, k) > 0,
                     f"({ties_ours} tokens)")
        report.check(case, "expert 2 (tied with 1, higher index) receives no token", loads[2] == 0, f"{loads}")
    if case == "bias":
        report.check(case, "expert 3 receives every token, expert 4 none", loads[3] == N and loads[4] == 0,
                     f"{loads}")
        # Expert 3 wins on its bias of 5 while its probability is small: a gate that took the bias in would be
        # ~5 instead, and `out` below (gates from p only) would be far off.
        report.check(case, "expert 3 is chosen where its probability is below 0.5 (the bias only selects)",
                     bool((ours_p[:, 3] < 0.5).any()))
    if case.startswith("k_equals_e"):
        report.check(case, "k = E: every expert receives every token", k == E and all(c == N for c in loads))

    report.compare(case, "out", "out", read(path("out.f32"), "<f4", [N, d]), out)
    report.compare(case, "aux", "aux_loss", [m["aux_loss"]], aux.reshape(1))
    report.compare(case, "grad", "h", read(path("dh.f32"), "<f4", [N, d]), h.grad)
    for p in m["params"]:
        report.compare(case, "grad", p["name"], read(path(p["grad"]), "<f4", p["shape"]), params[p["name"]].grad)


def main():
    torch.set_default_dtype(torch.float64)
    return run_cases(run_case, min_cases=5)


if __name__ == "__main__":
    sys.exit(main())

"""Oracle for the whole model: an independent float64 LLaMA in torch against our fp32 forward/backward.

    /usr/bin/python3 tests/oracle/test_model.py --dump <dump_model> --nobubble <ignored> --workdir <dir>

dump_model writes, for two cases (the `tiny` preset untied with batch 2 x seq 64; and tiny with tied
embeddings, batch 3 x seq 48), our weights, tokens, targets, loss, logits, every parameter gradient, and each
layer's output and its gradient. Here the LLaMA decoder is written from its published description (Touvron et
al. 2023; the Hugging Face LlamaForCausalLM layout), in float64:

    x = E[tokens]
    per layer:  x = x + Wo . attn(RoPE(Wq RMSNorm(x)), RoPE(Wk RMSNorm(x)), Wv RMSNorm(x))   (causal, GQA)
                x = x + Wdown (silu(Wgate RMSNorm(x)) * Wup RMSNorm(x))
    logits = Whead RMSNorm(x)   (Whead = E when tied);  loss = mean cross-entropy

RMSNorm(x) = x / sqrt(mean(x^2) + eps) * g; RoPE is the rotate-half form with inv_freq = theta^(-2i/hd);
grouped-query heads share kv heads by repeat_interleave; attention is softmax(q k^T / sqrt(hd) + causal mask) v.
The weights are our float32 values widened to float64, and torch autograd gives the gradients.

Error per tensor: ||ours - torch|| / ||torch|| (Frobenius, in float64); must be <= 1e-5 for the loss, the logits,
every parameter gradient, and (diagnostics that locate a fault) every layer's output and its gradient.
"""
import argparse
import json
import math
import os
import subprocess
import sys

import numpy as np
import torch
import torch.nn.functional as F

TOLERANCE = 1e-5


# ---------------------------------------------------------------------------------------------------------------
# The reference model (float64, autograd).

def rms_norm(x, gain, eps):
    variance = x.pow(2).mean(dim=-1, keepdim=True)
    return x * torch.rsqrt(variance + eps) * gain


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rope_cos_sin(seq_len, head_dim, theta):
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    positions = torch.arange(seq_len, dtype=torch.float64)
    freqs = torch.outer(positions, inv_freq)      # [T, hd/2]
    emb = torch.cat((freqs, freqs), dim=-1)        # [T, hd]
    return emb.cos(), emb.sin()


def apply_rope(x, cos, sin):
    """x: [B, heads, T, hd]; cos/sin: [T, hd]."""
    return x * cos + rotate_half(x) * sin


def attention(x, p, cfg, cos, sin):
    B, T, d = x.shape
    H, KV = cfg["num_heads"], cfg["num_kv_heads"]
    hd = d // H
    q = F.linear(x, p["attn.wq"]).view(B, T, H, hd).transpose(1, 2)
    k = F.linear(x, p["attn.wk"]).view(B, T, KV, hd).transpose(1, 2)
    v = F.linear(x, p["attn.wv"]).view(B, T, KV, hd).transpose(1, 2)
    q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    k = k.repeat_interleave(H // KV, dim=1)
    v = v.repeat_interleave(H // KV, dim=1)
    scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(hd)
    causal = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    scores = scores.masked_fill(causal, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    out = torch.matmul(probs, v).transpose(1, 2).reshape(B, T, d)
    return F.linear(out, p["attn.wo"])


def mlp(x, p):
    return F.linear(F.silu(F.linear(x, p["mlp.w_gate"])) * F.linear(x, p["mlp.w_up"]), p["mlp.w_down"])


def llama_forward(params, tokens, targets, cfg):
    """Returns loss, logits [B*T, V] and the residual stream after the embedding and after every block."""
    eps = cfg["norm_eps"]
    B, T = tokens.shape
    d = cfg["hidden_size"]
    cos, sin = rope_cos_sin(T, d // cfg["num_heads"], cfg["rope_theta"])
    x = F.embedding(tokens, params["embedding.weight"])
    stream = [x]
    for i in range(cfg["num_layers"]):
        p = {k[len(f"layers.{i}."):]: v for k, v in params.items() if k.startswith(f"layers.{i}.")}
        x = x + attention(rms_norm(x, p["attn_norm.weight"], eps), p, cfg, cos, sin)
        x = x + mlp(rms_norm(x, p["mlp_norm.weight"], eps), p)
        stream.append(x)
    for s in stream:
        s.retain_grad()
    head = params["embedding.weight"] if cfg["tie_embeddings"] else params["lm_head.weight"]
    logits = F.linear(rms_norm(x, params["final_norm.weight"], eps), head).reshape(B * T, -1)
    loss = F.cross_entropy(logits, targets.reshape(B * T), reduction="mean")
    return loss, logits, stream


# ---------------------------------------------------------------------------------------------------------------
# Comparing.

class Report:
    def __init__(self):
        self.passed = 0
        self.failed = 0
        self.worst = {}  # (case, category) -> max relative error

    def compare(self, case, category, name, ours, ref):
        ours = torch.as_tensor(ours, dtype=torch.float64).reshape(-1)
        if ref is None:  # autograd found no path from the loss to this tensor: a zero gradient
            ref = torch.zeros_like(ours)
        ref = ref.detach().to(torch.float64).reshape(-1)
        if ours.numel() != ref.numel():
            err = float("inf")
        else:
            denom = ref.norm().item()
            err = (ours - ref).norm().item() / denom if denom > 0 else (ours - ref).norm().item()
            if not math.isfinite(err):
                err = float("inf")
        ok = err <= TOLERANCE
        self.passed += ok
        self.failed += not ok
        key = (case, category)
        self.worst[key] = max(self.worst.get(key, 0.0), err)
        print(f"{'ok  ' if ok else 'FAIL'} {case:6s} {category:6s} {name:32s} rel err {err:.3e}"
              f"  (|ref| {ref.norm().item():.3e})")

    def check(self, case, name, ok, detail=""):
        self.passed += bool(ok)
        self.failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {case:6s} check  {name} {detail}")


def read(path, dtype, shape):
    a = np.fromfile(path, dtype=dtype)
    n = int(np.prod(shape))
    if a.size != n:
        raise SystemExit(f"{path}: {a.size} values, expected {n} for shape {shape}")
    return a.reshape(shape)


def run_case(dump, workdir, case, report):
    os.makedirs(workdir, exist_ok=True)
    subprocess.run([dump, "--workdir", workdir] + (["--tied"] if case == "tied" else []), check=True)
    with open(os.path.join(workdir, "manifest.json")) as f:
        m = json.load(f)
    cfg = m["config"]
    B, T, V = m["batch_size"], m["seq_len"], cfg["vocab_size"]
    path = lambda name: os.path.join(workdir, name)

    report.check(case, "tied flag", cfg["tie_embeddings"] == (case == "tied"))
    report.check(case, "layer-by-layer pass reproduces forward_backward bitwise",
                 m["layerwise_matches_forward_backward"])
    names = [p["name"] for p in m["params"]]
    expect_head = [] if cfg["tie_embeddings"] else ["lm_head.weight"]
    report.check(case, "canonical parameter order",
                 names[0] == "embedding.weight" and names[-1 - len(expect_head):] == ["final_norm.weight"] + expect_head
                 and len(names) == 1 + 9 * cfg["num_layers"] + 1 + len(expect_head), f"({len(names)} params)")

    tokens = torch.from_numpy(read(path(m["tokens"]), "<i4", [B, T]).astype(np.int64))
    targets = torch.from_numpy(read(path(m["targets"]), "<i4", [B, T]).astype(np.int64))
    params = {}
    for p in m["params"]:
        w = read(path(p["weight"]), "<f4", p["shape"]).astype(np.float64)
        params[p["name"]] = torch.from_numpy(w).requires_grad_(True)

    loss, logits, stream = llama_forward(params, tokens, targets, cfg)
    loss.backward()

    report.compare(case, "loss", "loss", [m["loss"]], loss.reshape(1))
    report.compare(case, "logits", "logits", read(path(m["logits"]), "<f4", [B * T, V]), logits)
    acts = m["activations"]
    report.check(case, "one activation per layer before the head", len(acts) == len(stream), f"({len(acts)})")
    for a, ref in zip(acts, stream):
        report.compare(case, "act", a["layer"], read(path(a["value"]), "<f4", a["shape"]), ref)
    for a, ref in zip(acts, stream):
        report.compare(case, "dact", a["layer"], read(path(a["grad"]), "<f4", a["shape"]), ref.grad)
    for p in m["params"]:
        report.compare(case, "grad", p["name"], read(path(p["grad"]), "<f4", p["shape"]), params[p["name"]].grad)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dump", required=True, help="the dump_model binary")
    ap.add_argument("--nobubble", help="ignored: this oracle needs only the dump program")
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()

    torch.set_default_dtype(torch.float64)
    report = Report()
    for case in ("untied", "tied"):
        run_case(args.dump, os.path.join(args.workdir, case), case, report)
    print()
    for (case, category), err in sorted(report.worst.items()):
        print(f"max rel err {case:6s} {category:6s} {err:.3e}")
    print(f"{report.passed} passed, {report.failed} failed")
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""Shared harness of the optimizer oracles (tests/oracle/test_optim_<name>.py).

Each oracle runs tests/oracle/dump_optimizer.cpp (our optimizers, through make_optimizer) with flags of its
choosing, reads what it wrote (this module), replays the same steps with its own float32 torch implementation of
the authors' published update rule, and compares (this module again).

    /usr/bin/python3 tests/oracle/test_optim_NAME.py --dump <dump_optimizer> --nobubble <ignored> --workdir <dir>

Files written by dump_optimizer (see its header): raw little-endian float32; weights_init.f32, grads_<k>.f32 and
weights_final.f32 hold all parameters concatenated in layout order; state_<i>.f32 one state tensor each;
manifest.json names everything.

Conventions shared by every oracle (they are ours, the published code has no notion of them):
  - the parameter kinds come from the manifest: embedding, hidden_matrix, norm_gain, output_head;
  - weight decay is never applied to norm gains ("weight_decay": false in the manifest), whatever the optimizer:
    the oracles give those parameters a weight decay of 0;
  - the lr of step k is the float32 manifest["lrs"][k] (warm-up then cosine decay), passed to torch as that exact
    float (lr32); an auxiliary AdamW (muon, mars) uses adam_lr * lr_k / peak_lr.

Error per tensor: max |ours - ref| / max |ref| over its elements (in float64; 1e-12 floor on the denominator).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import torch

TOLERANCE = 1e-5

torch.set_default_dtype(torch.float32)


def lr32(x):
    """A Python float holding exactly the float32 value of x (what our float hyperparameters are)."""
    return float(np.float32(x))


def read_flat(path, count):
    flat = np.fromfile(path, dtype="<f4")
    if flat.size != count:
        raise SystemExit(f"{path}: {flat.size} floats, expected {count}")
    return flat


def read_tensor(path, shape):
    n = int(np.prod(shape)) if len(shape) else 1
    return torch.from_numpy(read_flat(path, n).copy()).reshape(shape)


def read_set(path, params):
    """One float32 tensor per parameter, from a file of all parameters concatenated in layout order."""
    total = sum(int(np.prod(p["shape"])) for p in params)
    flat = read_flat(path, total)
    out, offset = [], 0
    for p in params:
        n = int(np.prod(p["shape"]))
        out.append(torch.from_numpy(flat[offset:offset + n].copy()).reshape(p["shape"]))
        offset += n
    return out


class Case:
    """One run of dump_optimizer: its manifest, inputs (initial weights, gradients, lrs) and our results."""

    def __init__(self, dump, workdir, flags):
        if os.path.isdir(workdir):
            shutil.rmtree(workdir)
        os.makedirs(workdir)
        cmd = [dump, "--workdir", workdir] + [str(f) for f in flags]
        print("$ " + " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)
        self.workdir = workdir
        with open(os.path.join(workdir, "manifest.json")) as f:
            self.m = json.load(f)
        self.params = self.m["params"]
        self.names = [p["name"] for p in self.params]
        self.steps = self.m["steps"]
        self.lrs = [lr32(x) for x in self.m["lrs"]]
        self.peak_lr = self.m["peak_lr"]
        self.weights_init = read_set(self.file(self.m["weights_init"]), self.params)
        self.weights_final = read_set(self.file(self.m["weights_final"]), self.params)
        self.grads = [read_set(self.file(g), self.params) for g in self.m.get("grads", [])]
        self.state = {s["name"]: read_tensor(self.file(s["file"]), s["shape"]) for s in self.m["state"]}

    def file(self, name):
        return os.path.join(self.workdir, name)

    def decays(self, i):
        """Whether parameter i takes weight decay (our rule: never a norm gain)."""
        return bool(self.params[i]["weight_decay"])

    def kind(self, i):
        return self.params[i]["kind"]


def relative_error(ours, ref):
    """max |ours - ref| / max |ref| over the tensor, in double."""
    ours, ref = ours.double(), ref.double()
    if ours.shape != ref.shape:
        return float("inf")
    return (ours - ref).abs().max().item() / max(ref.abs().max().item(), 1e-12)


class Checker:
    """Prints one ok/FAIL line per comparison and exits 1 if any failed."""

    def __init__(self, tolerance=TOLERANCE):
        self.tolerance = tolerance
        self.passed = 0
        self.failed = 0
        self.max_error = {}  # case label -> largest error seen
        print(f"error = max|ours - ref| / max|ref| per tensor, tolerance {tolerance:g}")

    def record(self, case_label, label, err, ok=None):
        """One line; `ok` given: a check that is not an error measure (kept out of the max error summary)."""
        if ok is None:
            ok = err <= self.tolerance
            if err == err:  # not NaN
                self.max_error[case_label] = max(self.max_error.get(case_label, 0.0), err)
            else:
                self.max_error[case_label] = float("nan")
        self.passed += ok
        self.failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {case_label}: {label:<44} {err:.3e}")

    def check(self, case_label, label, ours, ref):
        self.record(case_label, label, relative_error(ours, ref))

    def fail(self, case_label, message):
        self.failed += 1
        print(f"FAIL {case_label}: {message}")

    def note(self, case_label, message):
        print(f"     {case_label}: {message}")

    def compare_case(self, label, case, ref_weights, ref_state, unchecked=()):
        """Final weights, then every state tensor our optimizer exposes: each must have a reference (or be named
        in `unchecked`, a dict name -> reason), and every reference must exist on our side."""
        for name, ours, ref in zip(case.names, case.weights_final, ref_weights):
            self.check(label, f"weights.{name}", ours, ref)
        unchecked = dict(unchecked)
        for name, ours in case.state.items():
            if name in ref_state:
                self.check(label, name, ours, ref_state[name])
            elif name in unchecked:
                self.note(label, f"{name}: not compared ({unchecked[name]})")
            else:
                self.fail(label, f"state tensor {name!r} of ours has no reference value")
        for name in ref_state:
            if name not in case.state:
                self.fail(label, f"state tensor {name!r} is missing from our optimizer's state_tensors()")

    def finish(self):
        for label, err in self.max_error.items():
            print(f"max error {label}: {err:.3e}")
        print(f"{self.passed} passed, {self.failed} failed")
        sys.exit(1 if self.failed else 0)


def replay_and_compare(args, checker, optimizer, runs, replay):
    """For each (label, flags, hyperparameters) of `runs`: dump `optimizer`'s 12 steps with those flags, replay
    them with `replay(case, hyperparameters)` and compare; then report and exit."""
    for label, flags, hp in runs:
        case = Case(args.dump, f"{args.workdir}/{label}", ["--optimizer", optimizer, "--steps", 12] + flags)
        ref_weights, ref_state = replay(case, hp)
        checker.compare_case(label, case, ref_weights, ref_state)
    checker.finish()


def main(doc, optimizer, runs, replay):
    """An oracle script's whole main: its flags, then replay_and_compare over runs(lr32)."""
    replay_and_compare(parse_args(doc), Checker(), optimizer, runs(lr32), replay)


def parse_args(doc):
    """The flags every oracle script takes; makes --workdir."""
    ap = argparse.ArgumentParser(description=doc)
    ap.add_argument("--dump", required=True, help="the dump program (dump_optimizer, dump_adamw, dump_moe_...)")
    ap.add_argument("--nobubble", help="ignored: these oracles need only the dump program")
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    return args


def clones(tensors):
    return [t.clone() for t in tensors]


def adamw_published(p, grad, exp_avg, exp_avg_sq, step, lr, betas, eps, weight_decay):
    """AdamW as KellerJordan/Muon's adam_update + SingleDeviceMuonWithAuxAdam's step (muon.py):
        buf1.lerp_(g, 1 - b1); buf2.lerp_(g^2, 1 - b2)
        update = (buf1 / (1 - b1^t)) / ((buf2 / (1 - b2^t)).sqrt() + eps)
        p.mul_(1 - lr * wd); p.add_(update, alpha=-lr)
    Mathematically torch.optim.AdamW's rule (and AGI-Arena/MARS's 1-D branch), in float32."""
    b1, b2 = betas
    exp_avg.lerp_(grad, 1 - b1)
    exp_avg_sq.lerp_(grad.square(), 1 - b2)
    update = (exp_avg / (1 - b1 ** step)) / ((exp_avg_sq / (1 - b2 ** step)).sqrt() + eps)
    p.mul_(1 - lr * weight_decay)
    p.add_(update, alpha=-lr)

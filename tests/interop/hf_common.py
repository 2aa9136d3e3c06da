"""What the transformers proof tests share (tests/interop/test_hf_*.py; docs/interop.md).

Each test is run by the Python of `make hf-venv` (transformers, safetensors over Debian's torch):

    build/venv/bin/python tests/interop/test_hf_export.py --nobubble build/nobubble --workdir DIR

The data are byte text (vocab 256): a training file and a separate validation file, so that the validation
windows are simply the validation file's windows of T + 1 tokens at stride T, read in order from the first
(src/data/batch_loader.h): microbatch i is windows [i B, (i + 1) B). transformers' loss over them is the mean over
microbatches of each microbatch's mean cross-entropy, as `nobubble eval` and train's val_loss compute it.
"""
import argparse
import json
import os
import random
import shutil
import subprocess
import sys

import numpy as np
import torch
import torch.nn.functional as F

LOSS_RTOL = 1e-5  # float32 on both sides: transformers' LlamaForCausalLM against nobubble's CPU forward
RUN_TIMEOUT_S = 120


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--nobubble", required=True)
    p.add_argument("--workdir", required=True)
    args = p.parse_args()
    shutil.rmtree(args.workdir, ignore_errors=True)
    os.makedirs(args.workdir)
    torch.set_num_threads(2)
    return args


def run(cmd, expect_rc=0):
    """Runs nobubble (bounded); its stdout and stderr. A different exit code fails the test with its output
    (expect_rc None: any)."""
    cmd = [str(c) for c in cmd]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    if expect_rc is not None and p.returncode != expect_rc:
        sys.exit(f"FAIL: exit {p.returncode} (expected {expect_rc}): {' '.join(cmd)}\n{p.stdout}\n{p.stderr}")
    return p.stdout + p.stderr


def final_hashes(output):
    """The run's `final weights sha256` line, then its `final optimizer state sha256` line where it prints one (the
    pipeline and the oracle do, the plain loop of P = 1 does not)."""
    lines = [l for l in output.splitlines() if l.startswith(("final weights sha256", "final optimizer state sha256"))]
    if not lines or not lines[0].startswith("final weights"):
        sys.exit(f"FAIL: no final hashes in:\n{output}")
    return lines


def mpirun(np_):
    """The mpirun prefix of a run of `np_` ranks (as root, oversubscribed, as tests/cli/lib.sh), or None without
    mpirun."""
    if not shutil.which("mpirun"):
        return None
    os.environ.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                      OMPI_MCA_btl_vader_single_copy_mechanism="none")
    return ["mpirun", "--oversubscribe", "-np", str(np_)]


def write_text(path, n_bytes, seed):
    """Deterministic English-like bytes."""
    words = ("the a pipeline stage model weight token gradient bubble schedule loss step layer head rope norm "
             "export import safetensors llama transformers").split()
    rng = random.Random(seed)
    out = []
    size = 0
    while size < n_bytes:
        w = rng.choice(words) + rng.choice([" ", " ", " ", ", ", ". ", "\n"])
        out.append(w)
        size += len(w)
    with open(path, "w") as f:
        f.write("".join(out)[:n_bytes])


class Data:
    """A training and a validation text file in `workdir`, and the flags that name them."""

    def __init__(self, workdir, train_bytes=40000, val_bytes=8000):
        self.train = os.path.join(workdir, "train.txt")
        self.val = os.path.join(workdir, "val.txt")
        write_text(self.train, train_bytes, 1)
        write_text(self.val, val_bytes, 2)
        self.flags = ["--data", self.train, "--val-data", self.val]

    def val_windows(self, seq_len, count):
        """The first `count` validation windows: [count, T + 1] token ids."""
        tokens = np.frombuffer(open(self.val, "rb").read(), dtype=np.uint8).astype(np.int64)
        n = (len(tokens) - 1) // seq_len
        assert count <= n, f"{count} windows asked, the validation file has {n}"
        return torch.tensor(np.stack([tokens[k * seq_len: k * seq_len + seq_len + 1] for k in range(count)]))


def hf_loss(model, windows, batch):
    """transformers' loss as nobubble's val_loss: the mean over microbatches of B windows of the mean
    cross-entropy over their B T tokens (float32 model, the mean over microbatches in double)."""
    total = 0.0
    count = windows.shape[0] // batch
    with torch.no_grad():
        for i in range(count):
            w = windows[i * batch:(i + 1) * batch]
            logits = model(input_ids=w[:, :-1]).logits.float()
            total += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), w[:, 1:].reshape(-1)).item()
    return total / count


def eval_loss(output):
    """The loss `nobubble eval` prints ("eval loss X nats/token ...")."""
    for line in output.splitlines():
        if line.startswith("eval loss "):
            return float(line.split()[2])
    sys.exit(f"FAIL: no 'eval loss' line in:\n{output}")


def load_hf(path, dtype=torch.float32):
    """LlamaForCausalLM from `path`, its loading report checked: no missing, unexpected or mismatched keys."""
    from transformers import LlamaForCausalLM
    model, info = LlamaForCausalLM.from_pretrained(path, torch_dtype=dtype, output_loading_info=True,
                                                   attn_implementation="eager")
    for kind in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
        if info.get(kind):
            sys.exit(f"FAIL: {path}: transformers reports {kind}: {info[kind]}")
    model.eval()
    return model


def check_close(what, ours, theirs, rtol=LOSS_RTOL):
    rel = abs(ours - theirs) / abs(theirs)
    print(f"{what}: nobubble {ours!r}, transformers {theirs!r}, relative difference {rel:.3e} (bound {rtol:g})")
    if not rel <= rtol:
        sys.exit(f"FAIL: {what} differs by {rel:.3e} relative (bound {rtol:g})")


def last_val_loss(metrics_path):
    """The last val_loss train wrote to its --metrics file."""
    val = None
    with open(metrics_path) as f:
        for line in f:
            record = json.loads(line)
            if "val_loss" in record:
                val = record["val_loss"]
    if val is None:
        sys.exit(f"FAIL: no val_loss in {metrics_path}")
    return val


def folder_bytes(path):
    """Every file of a folder, by name, as bytes."""
    return {name: open(os.path.join(path, name), "rb").read() for name in sorted(os.listdir(path))}

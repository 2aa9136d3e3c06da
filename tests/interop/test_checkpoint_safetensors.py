"""Reads every file of a checkpoint's step directory with Hugging Face's `safetensors` (test_checkpoint_safetensors.sh).

Usage: test_checkpoint_safetensors.py STEP_DIR STAGES WEIGHTS_SHA256 OPTIMIZER_SHA256. Exit 0 when each stage file
- has the size and sha256 the manifest (format 2) gives it;
- opens with safetensors.safe_open (PyTorch), with the header's names, dtypes and shapes and the stage file's
  __metadata__ (format nobubble-stage-state, version 1);
- holds weights.<param> first, then the optimizer's state, no weight versions (1f1b keeps none);
and the weights of every stage, in file order, hash to WEIGHTS_SHA256 and the rest to OPTIMIZER_SHA256 (what the run
printed: pipeline/stage/state_hash.h), so the values safetensors reads are the run's.
"""
import hashlib
import json
import os
import struct
import sys

import torch
from safetensors import safe_open

DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "I32": torch.int32}


def header_of(path):
    """The file's JSON header, its tensors in data order (safe_open lists names sorted)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    metadata = header.pop("__metadata__", {})
    return metadata, sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0])


def main():
    step_dir, stages, want_weights, want_optimizer = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    with open(os.path.join(step_dir, "manifest.json")) as f:
        manifest = json.load(f)
    assert manifest["format"] == 2, manifest["format"]
    files = {e["name"]: e for e in manifest["files"]}
    assert sorted(files) == [f"stage_{s}.safetensors" for s in range(stages)], sorted(files)
    weights, optimizer = hashlib.sha256(), hashlib.sha256()
    for s in range(stages):
        name = f"stage_{s}.safetensors"
        path = os.path.join(step_dir, name)
        data = open(path, "rb").read()
        assert len(data) == files[name]["bytes"], name
        assert hashlib.sha256(data).hexdigest() == files[name]["sha256"], name
        metadata, entries = header_of(path)
        assert metadata == {"format": "nobubble-stage-state", "version": "1"}, metadata
        names = [n for n, _ in entries]
        first_state = next(i for i, n in enumerate(names) if not n.startswith("weights."))
        assert all(n.startswith("weights.") for n in names[:first_state]) and first_state > 0, names
        assert not any(n.startswith("weights.") or n.startswith("version.") for n in names[first_state:]), names
        assert any(n.startswith("exp_avg.") for n in names) and any(n.startswith("exp_avg_sq.") for n in names)
        with safe_open(path, framework="pt") as f:
            assert f.metadata() == metadata, f.metadata()
            assert sorted(f.keys()) == sorted(names), (sorted(f.keys()), names)
            for n, info in entries:
                t = f.get_tensor(n)
                assert t.dtype == DTYPES[info["dtype"]] and list(t.shape) == info["shape"], (n, t.dtype, t.shape)
                (weights if n.startswith("weights.") else optimizer).update(t.contiguous().numpy().tobytes())
        print(f"{name}: {len(names)} tensors ({first_state} weights), {len(data)} bytes")
    assert weights.hexdigest() == want_weights, (weights.hexdigest(), want_weights)
    assert optimizer.hexdigest() == want_optimizer, (optimizer.hexdigest(), want_optimizer)
    print("weights and optimizer state sha256 as the run printed")


if __name__ == "__main__":
    main()

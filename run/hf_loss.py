#!/usr/bin/env python3
"""A Hugging Face folder's loss in transformers over an llm.c validation shard (docs/tutorial.md): the number
`nobubble eval --hf DIR --val-data SHARD` prints, computed by transformers' own LlamaForCausalLM.

    build/venv/bin/python run/hf_loss.py DIR --val-data SHARD [--seq-length 256 --micro-batch-size 8 --batches 16]

The windows are nobubble's validation windows of a --val-data file (src/data/batch_loader.h): T + 1 tokens at stride
T from the file's start, microbatch i the windows [i B, (i + 1) B); the loss is the mean over microbatches of each
microbatch's mean cross-entropy (nats per token), as `eval` and train's val_loss compute it.
"""
import argparse
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F


def read_shard(path):
    with open(path, "rb") as f:
        header = struct.unpack("<256i", f.read(1024))
        if header[0] != 20240520 or header[1] != 1:
            sys.exit(f"hf_loss: error: {path} is not an llm.c uint16 shard")
        return np.frombuffer(f.read(2 * header[2]), dtype=np.uint16).astype(np.int64)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folder")
    p.add_argument("--val-data", required=True)
    p.add_argument("--seq-length", type=int, default=256)
    p.add_argument("--micro-batch-size", type=int, default=8)
    p.add_argument("--batches", type=int, default=16)
    a = p.parse_args()
    from transformers import LlamaForCausalLM
    model = LlamaForCausalLM.from_pretrained(a.folder, torch_dtype=torch.float32, attn_implementation="eager").eval()
    ids = read_shard(a.val_data)
    T, B = a.seq_length, a.micro_batch_size
    windows = (len(ids) - 1) // T
    batches = min(a.batches, windows // B)
    if batches == 0:
        sys.exit(f"hf_loss: error: {a.val_data} holds {windows} windows of {T + 1} tokens, fewer than one microbatch")
    losses = []
    with torch.no_grad():
        for i in range(batches):
            x = torch.tensor(np.stack([ids[(i * B + j) * T:(i * B + j) * T + T + 1] for j in range(B)]))
            logits = model(x[:, :-1]).logits
            losses.append(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1)).item())
    loss = sum(losses) / len(losses)
    print(f"transformers: {a.folder} loss {loss:.4f} nats/token over {batches} microbatches of {B} x {T} tokens "
          f"(perplexity {np.exp(loss):.2f})")


if __name__ == "__main__":
    main()

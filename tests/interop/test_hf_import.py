"""`nobubble eval --hf` and `train --init-from-hf` on models transformers itself makes (issue 38, 7b;
docs/interop.md).

transformers creates LlamaForCausalLM models with random weights (a larger init range and random norm gains, so
that the logits are far from uniform) and saves them; nobubble imports each, and its mean loss over the validation
windows equals transformers' within 1e-5 relative (float32), its logits for one microbatch position by position
within LOGIT_ATOL:
  - a tied GQA model (float32, one file; also saved sharded, in bfloat16 and in float16: the loss of the widened
    weights, as transformers computes them in float32);
  - SmolLM-135M's shape (hidden 576, 9 heads, 3 KV heads, ffn 1536, vocab 49152, tied) with 4 of its 30 blocks to
    keep the test within seconds (NOBUBBLE_SMOLLM_LAYERS=30 runs the whole depth).
Then `train --init-from-hf` gives the same run at P = 1, at P = 2 and under mpirun, and configs nobubble does not
compute are refused by name, as is a shape flag that disagrees with config.json.
"""
import json
import os
import shutil
import sys

import numpy as np
import torch

from hf_common import Data, check_close, eval_loss, final_hashes, hf_loss, load_hf, mpirun, parse_args, run

SEQ, BATCH, EVAL_ITERS = 32, 2, 3
LOGIT_ATOL = 1e-4  # per logit, float32 on both sides (measured: printed below)
EVAL = ["--seq-length", SEQ, "--micro-batch-size", BATCH, "--eval-iters", EVAL_ITERS]


def make_model(path, seed, dtype=torch.float32, max_shard_size="5GB", **shape):
    """A LlamaForCausalLM of `shape` with random weights, saved by transformers to `path`."""
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(seed)
    config = LlamaConfig(rms_norm_eps=1e-5, rope_theta=10000.0, max_position_embeddings=256, initializer_range=0.08,
                         **shape)
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
    model.to(dtype).save_pretrained(path, safe_serialization=True, max_shard_size=max_shard_size)
    return path


def check_import(args, data, path, what):
    """nobubble's loss and first microbatch's logits of the folder against transformers'."""
    logits_path = os.path.join(args.workdir, "logits.f32")
    ours = eval_loss(run([args.nobubble, "eval", "--hf", path, *data.flags, *EVAL, "--dump-logits", logits_path]))
    model = load_hf(path, torch.float32)
    windows = data.val_windows(SEQ, EVAL_ITERS * BATCH)
    check_close(f"{what}: mean loss", ours, hf_loss(model, windows, BATCH))
    vocab = model.config.vocab_size
    ours_logits = torch.from_numpy(np.fromfile(logits_path, dtype=np.float32).reshape(BATCH, SEQ, vocab))
    with torch.no_grad():
        theirs_logits = model(input_ids=windows[:BATCH, :-1]).logits.float()
    diff = (ours_logits - theirs_logits).abs()
    print(f"{what}: logits of {BATCH} x {SEQ} positions x {vocab}: max |difference| {diff.max().item():.3e}, "
          f"largest |logit| {theirs_logits.abs().max().item():.3f} (bound {LOGIT_ATOL:g})")
    if not diff.max().item() <= LOGIT_ATOL:
        pos = divmod(int(diff.amax(dim=-1).argmax()), SEQ)
        sys.exit(f"FAIL: {what}: logits differ by {diff.max().item():.3e} at (window, position) {pos}")
    return ours


def check_dtypes_and_shards(args, data, tiny):
    single = make_model(os.path.join(args.workdir, "tied_f32"), 3, **tiny)
    loss = check_import(args, data, single, "tied GQA float32")
    sharded = make_model(os.path.join(args.workdir, "tied_sharded"), 3, max_shard_size="60KB", **tiny)
    if not os.path.exists(os.path.join(sharded, "model.safetensors.index.json")):
        sys.exit("FAIL: transformers did not shard at 60KB")
    ours = eval_loss(run([args.nobubble, "eval", "--hf", sharded, *data.flags, *EVAL]))
    print(f"sharded: nobubble eval --hf {ours!r} (single file {loss!r})")
    if ours != loss:
        sys.exit("FAIL: the sharded folder evaluates to another loss than the single file")
    for dtype in (torch.bfloat16, torch.float16):
        path = make_model(os.path.join(args.workdir, f"tied_{dtype}".replace("torch.", "")), 3, dtype=dtype, **tiny)
        check_import(args, data, path, f"tied GQA saved in {dtype}")
    return single, loss


def check_train_from_import(args, data, tiny):
    """train --init-from-hf of an untied folder at P = 1, at P = 2 in one process and under mpirun -np 2 (each rank
    reads the folder): the same final weights (1f1b's do not depend on the cut; the two at P = 2 the same optimizer
    state too), so every
    stage took its slice of the folder's weights by name. (That the weights are the folder's bit for bit is
    test_hf_roundtrip's: the same run from the checkpoint they were exported from.)"""
    folder = make_model(os.path.join(args.workdir, "untied_f32"), 5, **{**tiny, "tie_word_embeddings": False})
    flags = ["train", "--init-from-hf", folder, *data.flags, "--seq-length", SEQ, "--micro-batch-size", BATCH,
             "--num-microbatches", 2, "--train-iters", 2, "--lr", 1e-3, "--eval-iters", 1]
    runs = {"P = 1": run([args.nobubble, *flags, "--stages", 1]),
            "P = 2": run([args.nobubble, *flags, "--stages", 2])}
    prefix = mpirun(2)
    if prefix:
        runs["mpirun -np 2"] = run([*prefix, args.nobubble, *flags])
    hashes = {name: final_hashes(out) for name, out in runs.items()}
    for name, h in hashes.items():
        print(f"train --init-from-hf, {name}: {h}")
    if len({h[0] for h in hashes.values()}) != 1 or hashes["P = 2"][1:] != hashes.get("mpirun -np 2", hashes["P = 2"])[1:]:
        sys.exit("FAIL: runs from the same import at different P differ")


def refused(args, data, folder, edit, flags, words):
    """A copy of `folder` whose config.json `edit` changes (or the folder itself with `flags`) is refused by
    train --init-from-hf with one line naming `words`."""
    path = folder
    if edit:
        path = os.path.join(args.workdir, "edited")
        shutil.rmtree(path, ignore_errors=True)
        shutil.copytree(folder, path)
        config = json.load(open(os.path.join(path, "config.json")))
        config.update(edit)
        json.dump(config, open(os.path.join(path, "config.json"), "w"))
    out = run([args.nobubble, "train", "--init-from-hf", path, *data.flags, "--lr", 1e-3, "--train-iters", 1,
               "--seq-length", SEQ, "--micro-batch-size", BATCH, *flags], expect_rc=2)
    lines = [l for l in out.splitlines() if l.strip()]
    if len(lines) != 1 or not all(w in lines[0] for w in words):
        sys.exit(f"FAIL: expected one error line naming {words}, got:\n{out}")
    print(f"refused: {lines[0]}")


def main():
    args = parse_args()
    data = Data(args.workdir)
    tiny = dict(vocab_size=256, hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, tie_word_embeddings=True)
    folder, loss = check_dtypes_and_shards(args, data, tiny)
    layers = int(os.environ.get("NOBUBBLE_SMOLLM_LAYERS", "4"))
    smollm = dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=layers,
                  num_attention_heads=9, num_key_value_heads=3, tie_word_embeddings=True)
    check_import(args, data, make_model(os.path.join(args.workdir, "smollm_shape"), 4, **smollm),
                 f"SmolLM-135M's shape, {layers} blocks")
    check_train_from_import(args, data, tiny)
    refused(args, data, folder, {"rope_scaling": {"rope_type": "linear", "factor": 2.0}}, [], ["rope_scaling"])
    refused(args, data, folder, {"model_type": "mistral"}, [], ["model_type", "mistral"])
    refused(args, data, folder, {"attention_bias": True}, [], ["attention_bias"])
    refused(args, data, folder, {"sliding_window": 4096}, [], ["sliding_window"])
    refused(args, data, folder, None, ["--hidden-size", 128], ["--hidden-size 128", "hidden_size 64"])
    print("PASS")


if __name__ == "__main__":
    main()

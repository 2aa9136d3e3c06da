"""`nobubble generate` (issue 40, 2) against transformers' generate on the exported model.

1. A BPE model: prepare_tokens on a generated corpus, `nobubble train` on the shards (the tokenizer beside them),
   `nobubble export`. From several prompts, greedy decoding (--temperature 0 --ignore-eos) gives, token for token,
   the 50 ids of LlamaForCausalLM.generate(do_sample=False) on the export, and from the checkpoint (--load) as from
   the folder (--hf). The text printed is the prompt and the tokenizer's decode of those ids.
2. A pipelined checkpoint (mpirun -np 2, 1f1b) gathered into one process generates what its export does in
   transformers; a byte model (text data, no tokenizer) too.
3. Sampling with a seed repeats itself; another seed gives other tokens; top-k 1 is greedy. `train
   --sample-interval` writes its samples into the log and the metrics and leaves the weights' bits as they were.
4. Bad input, one error line and exit 2 each: a prompt longer than the sequence length, a prompt and
   --max-new-tokens past it, --top-p 0, a tokenizer larger than the model's vocabulary.
"""
import json
import os
import subprocess
import sys

import torch

from hf_common import load_hf, mpirun, parse_args, run, write_text
from test_hf_prepare_tokens import prepare, write_corpus
from test_hf_tokenizer_export import refused, tiny

NEW_TOKENS = 50
PROMPTS = ["w1 alpha", "gamma naïve 😀", "end. beta", " x"]


def our_ids(nobubble, source_flags, prompt, *extra):
    """The new ids `generate` prints, and its output (the text may hold invalid UTF-8: a token can end mid-character)."""
    cmd = [str(c) for c in [nobubble, "generate", *source_flags, "--prompt", prompt, "--max-new-tokens", NEW_TOKENS,
                            "--temperature", 0, "--ignore-eos", "--print-ids", *extra]]
    p = subprocess.run(cmd, capture_output=True, timeout=120)
    out = (p.stdout + p.stderr).decode("utf-8", "replace")
    if p.returncode != 0:
        sys.exit(f"FAIL: exit {p.returncode}: {' '.join(cmd)}\n{out}")
    lines = [l for l in out.splitlines() if l.startswith("ids: ")]
    if len(lines) != 1:
        sys.exit(f"FAIL: no 'ids:' line in\n{out}")
    return [int(t) for t in lines[0][5:].split()], out


def their_ids(model, prompt_ids):
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt_ids]), do_sample=False, max_new_tokens=NEW_TOKENS,
                             min_new_tokens=0, eos_token_id=None, pad_token_id=0,
                             synced_gpus=False)  # transformers would import torch.distributed.fsdp to ask,
        # which Debian's torch 1.13 cannot import under Python 3.11
    return out[0, len(prompt_ids):].tolist()


def check_greedy(nobubble, what, source_flags, export_dir, encode):
    model = load_hf(export_dir)
    model.generation_config.eos_token_id = None
    for prompt in PROMPTS:
        ours, _ = our_ids(nobubble, source_flags, prompt)
        theirs = their_ids(model, encode(prompt))
        if ours != theirs:
            first = next(i for i in range(min(len(ours), len(theirs))) if ours[i] != theirs[i]) \
                if any(a != b for a, b in zip(ours, theirs)) else min(len(ours), len(theirs))
            sys.exit(f"FAIL: {what}, prompt {prompt!r}: greedy ids differ from token {first}:\n nobubble     {ours}\n"
                     f" transformers {theirs}")
    print(f"{what}: greedy = transformers generate(do_sample=False), {NEW_TOKENS} tokens from {len(PROMPTS)} prompts")


def main():
    args = parse_args()
    from tokenizers import Tokenizer
    nb, w = args.nobubble, args.workdir
    write_corpus(os.path.join(w, "corpus.txt"), 400, 5)
    data = os.path.join(w, "tok")
    prepare([os.path.join(w, "corpus.txt"), "--out", data, "--vocab-size", 320, "--val-fraction", 0.1])
    tok = Tokenizer.from_file(os.path.join(data, "tokenizer.json"))
    vocab = tok.get_vocab_size()
    flags = ["--data", os.path.join(data, "train_*.bin"), "--val-data", os.path.join(data, "val_000000.bin")]
    shape = tiny(vocab, seq_length=64)

    def encode(text):
        return tok.encode(text, add_special_tokens=False).ids

    # 1. One process.
    ck = os.path.join(w, "ck")
    run([nb, "train", *flags, *shape, "--train-iters", 150, "--save", ck, "--save-interval", 150])
    out = os.path.join(w, "export")
    run([nb, "export", "--load", ck, "--out", out])
    check_greedy(nb, "checkpoint (--load)", ["--load", ck], out, encode)
    check_greedy(nb, "folder (--hf)", ["--hf", out], out, encode)
    ids, text = our_ids(nb, ["--load", ck], PROMPTS[0])
    want = (PROMPTS[0] + tok.decode(ids, skip_special_tokens=False)).replace("\ufffd", "")
    if want not in text.replace("\ufffd", ""):
        sys.exit(f"FAIL: the printed text is not the prompt and the tokenizer's decode:\n{text}\nwant {want!r}")

    # 2. A pipelined checkpoint, and a byte model.
    prefix = mpirun(2)
    if prefix:
        pk = os.path.join(w, "pk")
        run(["timeout", "-k", 5, 100, *prefix, nb, "train", *flags, *shape, "--train-iters", 20, "--stages", 2,
             "--schedule", "1f1b", "--num-microbatches", 2, "--save", pk, "--save-interval", 20])
        pout = os.path.join(w, "pexport")
        run([nb, "export", "--load", pk, "--out", pout])
        check_greedy(nb, "pipelined checkpoint (P = 2, gathered)", ["--load", pk], pout, encode)
    write_text(os.path.join(w, "bytes.txt"), 30000, 7)
    bk = os.path.join(w, "bk")
    run([nb, "train", "--data", os.path.join(w, "bytes.txt"), *tiny(256, seq_length=128), "--train-iters", 30,
         "--save", bk, "--save-interval", 30])
    bout = os.path.join(w, "bexport")
    run([nb, "export", "--load", bk, "--out", bout])
    check_greedy(nb, "byte model", ["--load", bk], bout, lambda s: list(s.encode("utf-8")))

    # 3. Sampling.
    def sampled(*extra):
        return our_ids(nb, ["--load", ck], PROMPTS[1], *extra)[0]
    a, b = sampled("--temperature", 1, "--seed", 7), sampled("--temperature", 1, "--seed", 7)
    c = sampled("--temperature", 1, "--seed", 8)
    if a != b or a == c:
        sys.exit(f"FAIL: sampling: seed 7 twice {a} / {b}, seed 8 {c}")
    if sampled("--temperature", 0.7, "--top-k", 1, "--seed", 9) != our_ids(nb, ["--load", ck], PROMPTS[1])[0]:
        sys.exit("FAIL: --top-k 1 is not greedy")
    if sampled("--temperature", 1, "--top-p", 0.9, "--seed", 7) != sampled("--temperature", 1, "--top-p", 0.9,
                                                                             "--seed", 7):
        sys.exit("FAIL: --top-p with a seed does not repeat itself")
    print("sampling: a seed repeats itself, another seed differs, --top-k 1 is greedy")

    # 3b. Samples while training: every 10 steps, in the log and the metrics; the weights' bits as without them.
    metrics = os.path.join(w, "m.jsonl")
    sampled_run = run([nb, "train", *flags, *shape, "--train-iters", 20, "--sample-interval", 10, "--sample-tokens", 12,
                       "--sample-prompt", "w1", "--metrics", metrics])
    plain_run = run([nb, "train", *flags, *shape, "--train-iters", 20])
    final = [l for l in sampled_run.splitlines() if l.startswith("final weights sha256")]
    if not final or final != [l for l in plain_run.splitlines() if l.startswith("final weights sha256")]:
        sys.exit(f"FAIL: --sample-interval changed the run's weights:\n{sampled_run}\n{plain_run}")
    records = [json.loads(l) for l in open(metrics)]
    with_sample = [r["step"] for r in records if "sample" in r]
    if with_sample != [10, 20] or not all(r["sample"].startswith("w1") for r in records if "sample" in r):
        sys.exit(f"FAIL: samples at steps {with_sample} (want [10, 20]), each starting with the prompt: {records}")
    if sampled_run.count("sample at step ") != 2:
        sys.exit(f"FAIL: two 'sample at step' lines expected:\n{sampled_run}")
    print(f"train --sample-interval 10: samples at steps {with_sample}, same final weights; step 20: "
          f"{records[-1]['sample']!r}")

    # 4. Bad input.
    gen = [nb, "generate", "--load", ck]
    refused([*gen, "--prompt", "alpha " * 80], 2, "longer than the model's sequence length 64")
    refused([*gen, "--prompt", PROMPTS[0], "--max-new-tokens", 200], 2, "pass the model's sequence length 64")
    refused([*gen, "--prompt", PROMPTS[0], "--top-p", 0], 2, "--top-p 0")
    refused([nb, "generate", "--load", bk, "--prompt", "a", "--tokenizer", os.path.join(data, "tokenizer.json")], 2,
            f"has {vocab} ids but the model's vocab_size is 256")
    refused([nb, "train", *flags, *shape, "--train-iters", 2, "--sample-interval", 1, "--sample-tokens", 64], 2,
            "--sample-tokens 64 pass --seq-length 64")
    refused([nb, "train", *flags, *shape, "--train-iters", 2, "--sample-interval", 1, "--stages", 2], 2,
            "--sample-interval: samples are drawn where one process holds the whole model")
    print("PASS")


if __name__ == "__main__":
    main()

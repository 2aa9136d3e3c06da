"""The trainer knows the tokenizer (issue 40, 1): run/prepare_tokens.py's tokenizer.json, beside its shards, is the
run's; the checkpoint keeps a copy and records its identity; `nobubble export` writes it with tokenizer_config.json
and special_tokens_map.json, so that transformers' AutoTokenizer loads the very tokenizer:

1. prepare_tokens on a generated corpus (a byte-level BPE of ~400 ids), `nobubble train` on the shards with --save
   (--vocab-size the tokenizer's): the step directory holds tokenizer.json, byte for byte, and the manifest its
   sha256 and vocab_size;
2. `nobubble export` of it: AutoTokenizer.from_pretrained(out) is a fast tokenizer that encodes and decodes every
   test string as `tokenizers.Tokenizer.from_file` does, its eos/bos token <|endoftext|> (id 0, also in
   config.json and generation_config.json), model_max_length the run's --seq-length; LlamaForCausalLM loads the
   folder with no missing or unexpected keys;
3. a pipelined run under mpirun (2 ranks) with a padded vocabulary records the same tokenizer;
4. bad input, one error line each: --vocab-size below the tokenizer's (exit 2), and a resume with another tokenizer
   (exit 1). (tests/cli/test_tokenizer.sh holds the others, without Python packages.)
"""
import glob
import hashlib
import json
import os
import subprocess
import sys

from hf_common import load_hf, mpirun, parse_args, run
from test_hf_prepare_tokens import prepare, write_corpus

STRINGS = ["w1 alpha beta", " leading space and  two", "naïve 😀 日本語\tend.", "gamma<|endoftext|>épsilon", "",
           "x" * 60 + "\n\nnew document"]


def tiny(vocab_size, seq_length=32):
    return ["--model", "tiny", "--num-layers", 2, "--hidden-size", 64, "--num-attention-heads", 4,
            "--ffn-hidden-size", 96, "--vocab-size", vocab_size, "--seq-length", seq_length, "--micro-batch-size", 2,
            "--lr", 1e-3, "--eval-iters", 1, "--log-interval", 1]


def sha256_of(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def check_checkpoint(step_dir, tokenizer_path, vocab_size):
    """The step directory's copy and the manifest's identity of the tokenizer."""
    manifest = json.load(open(os.path.join(step_dir, "manifest.json")))
    copy = os.path.join(step_dir, "tokenizer.json")
    if not os.path.exists(copy) or open(copy, "rb").read() != open(tokenizer_path, "rb").read():
        sys.exit(f"FAIL: {step_dir} holds no copy of {tokenizer_path}: {sorted(os.listdir(step_dir))}")
    want = {"sha256": sha256_of(tokenizer_path), "vocab_size": vocab_size}
    if manifest["run"].get("tokenizer") != want:
        sys.exit(f"FAIL: {step_dir}/manifest.json: tokenizer {manifest['run'].get('tokenizer')}, want {want}")
    if "tokenizer.json" not in [f["name"] for f in manifest["files"]]:
        sys.exit(f"FAIL: {step_dir}/manifest.json does not list tokenizer.json among its files")


def refused(cmd, code, words):
    """`cmd` exits `code` with one line `nobubble: error: ...` holding `words` on stderr."""
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=120)
    lines = p.stderr.strip().splitlines()
    if p.returncode != code or len(lines) != 1 or not lines[0].startswith("nobubble: error: ") or words not in lines[0]:
        sys.exit(f"FAIL: {cmd}: expected exit {code} and one error line with {words!r}, got exit {p.returncode}: "
                 f"{p.stderr!r}")
    print(f"refused (exit {code}): {lines[0]}")


def main():
    args = parse_args()
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer, PreTrainedTokenizerFast
    w = args.workdir
    write_corpus(os.path.join(w, "corpus.txt"), 300, 3)
    data = os.path.join(w, "tok")
    prepare([os.path.join(w, "corpus.txt"), "--out", data, "--vocab-size", 400, "--val-fraction", 0.1])
    tokenizer_path = os.path.join(data, "tokenizer.json")
    ours = Tokenizer.from_file(tokenizer_path)
    vocab = ours.get_vocab_size()
    flags = ["--data", os.path.join(data, "train_*.bin"), "--val-data", os.path.join(data, "val_000000.bin")]

    # 1. A run on the shards: the tokenizer beside them is in its checkpoint.
    ck = os.path.join(w, "ck")
    run([args.nobubble, "train", *flags, *tiny(vocab), "--train-iters", 3, "--save", ck, "--save-interval", 3])
    check_checkpoint(os.path.join(ck, "step_3"), tokenizer_path, vocab)
    print(f"train: {ck}/step_3 holds tokenizer.json ({vocab} ids) and its manifest the sha256")

    # 2. export, and transformers' AutoTokenizer on the folder.
    out = os.path.join(w, "hf")
    line = run([args.nobubble, "export", "--load", ck, "--out", out])
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if not os.path.exists(os.path.join(out, name)):
            sys.exit(f"FAIL: export wrote no {name}: {sorted(os.listdir(out))}\n{line}")
    if open(os.path.join(out, "tokenizer.json"), "rb").read() != open(tokenizer_path, "rb").read():
        sys.exit("FAIL: the exported tokenizer.json is not prepare_tokens' file")
    hf = AutoTokenizer.from_pretrained(out)
    if not isinstance(hf, PreTrainedTokenizerFast) or not hf.is_fast:
        sys.exit(f"FAIL: AutoTokenizer gives {type(hf)}, not a fast tokenizer")
    eot = ours.token_to_id("<|endoftext|>")
    if (hf.eos_token, hf.bos_token, hf.eos_token_id, hf.model_max_length) != ("<|endoftext|>", "<|endoftext|>", eot, 32):
        sys.exit(f"FAIL: eos {hf.eos_token!r} ({hf.eos_token_id}), bos {hf.bos_token!r}, model_max_length "
                 f"{hf.model_max_length}; want <|endoftext|> ({eot}) and 32")
    for s in STRINGS:
        got, want = hf(s)["input_ids"], ours.encode(s).ids
        if got != want:
            sys.exit(f"FAIL: {s!r}: AutoTokenizer {got}, tokenizers {want}")
        if hf.decode(got, skip_special_tokens=True) != ours.decode(want):
            sys.exit(f"FAIL: {s!r}: AutoTokenizer decodes {hf.decode(got)!r}, tokenizers {ours.decode(want)!r}")
    if len(hf) != vocab:
        sys.exit(f"FAIL: AutoTokenizer has {len(hf)} ids, tokenizers {vocab}")
    for name in ("config.json", "generation_config.json"):
        c = json.load(open(os.path.join(out, name)))
        if (c.get("bos_token_id"), c.get("eos_token_id")) != (eot, eot):
            sys.exit(f"FAIL: {name}: bos/eos ids {c.get('bos_token_id')}/{c.get('eos_token_id')}, want {eot}")
    load_hf(out)
    print(f"export: AutoTokenizer loads {type(hf).__name__} and encodes {len(STRINGS)} strings as tokenizers does; "
          f"eos <|endoftext|> = {eot} in config.json and generation_config.json; LlamaForCausalLM loads")

    # 3. A pipelined run under mpirun, its vocabulary padded past the tokenizer's, records it too.
    prefix = mpirun(2)
    if prefix:
        ck2 = os.path.join(w, "ck_mpi")
        run(["timeout", "-k", 5, 100, *prefix, args.nobubble, "train", *flags, *tiny(vocab + 8), "--train-iters", 2,
             "--save", ck2, "--save-interval", 2])
        check_checkpoint(os.path.join(ck2, "step_2"), tokenizer_path, vocab)
        print(f"mpirun -np 2 with --vocab-size {vocab + 8}: the checkpoint records the tokenizer")

    # 4. Bad input.
    refused([args.nobubble, "train", *flags, *tiny(vocab - 1), "--train-iters", 1], 2,
            f"beside the --data shards has {vocab} ids but the model's vocab_size is {vocab - 1}: set --vocab-size "
            f"{vocab}")
    other_dir = os.path.join(w, "other")
    prepare([os.path.join(w, "corpus.txt"), "--out", other_dir, "--vocab-size", vocab - 20])
    other = os.path.join(other_dir, "tokenizer.json")
    other_vocab = Tokenizer.from_file(other).get_vocab_size()
    refused([args.nobubble, "train", *flags, *tiny(vocab), "--train-iters", 3, "--tokenizer", other, "--load", ck], 1,
            f"this run's tokenizer '{other}' ({other_vocab} ids, sha256 {sha256_of(other)[:12]}...) is not the "
            f"checkpoint's '{os.path.join(ck, 'step_3', 'tokenizer.json')}' ({vocab} ids")
    print("ok")


if __name__ == "__main__":
    main()

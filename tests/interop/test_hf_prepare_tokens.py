"""run/prepare_tokens.py (issue 40, 1): text into llm.c shards with a byte-level BPE of Hugging Face `tokenizers`.

1. Trained on a corpus of documents (separated by empty lines; emoji, accents, runs of spaces and tabs, a file
   without a final newline): the shards' headers are llm.c's, every document is there once, preceded by
   <|endoftext|> (id 0), and decodes to its own text; the last ceil(0.05 n) documents are the validation shard;
   --shard-tokens cuts the train ids into shards that concatenate to the same ids; `nobubble train` reads them.
2. Applied with --tokenizer: the ids are the library's own encode of each document.
3. Bad input, one error line and exit 2 each: no text, one document, a vocabulary above uint16, a tokenizer.json
   that is not a byte-level BPE, one without <|endoftext|>, a missing file.
"""
import glob
import math
import os
import struct
import subprocess
import sys

from hf_common import parse_args, run

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "run", "prepare_tokens.py")
WORDS = ["alpha", "beta", "gamma", "épsilon", "naïve", "😀", "日本語", "  ", "\t", "x" * 40, "end."]


def prepare(args, expect_rc=0):
    p = subprocess.run([sys.executable, SCRIPT, *map(str, args)], capture_output=True, text=True, timeout=120)
    if p.returncode != expect_rc:
        sys.exit(f"FAIL: exit {p.returncode} (expected {expect_rc}): prepare_tokens.py {args}\n{p.stdout}\n{p.stderr}")
    return p.stdout, p.stderr


def write_corpus(path, n_documents, seed, final_newline=True):
    """Documents of 1-4 lines, separated by 1-3 empty (or whitespace-only) lines; the documents, as written."""
    import random
    r = random.Random(seed)
    documents = []
    with open(path, "w", encoding="utf-8", newline="") as f:
        for d in range(n_documents):
            lines = ["w" + str(d) + " " + " ".join(r.choice(WORDS) for _ in range(r.randint(1, 9))) + "\n"
                     for _ in range(r.randint(1, 4))]
            if d == n_documents - 1 and not final_newline:
                lines[-1] = lines[-1].rstrip("\n")
            documents.append("".join(lines))
            f.write(documents[-1])
            if d < n_documents - 1:
                f.write(r.choice(["\n", "\n\n", " \n", "\t\n\n"]))
    return documents


def read_shard(path):
    with open(path, "rb") as f:
        data = f.read()
    header = struct.unpack("<256i", data[:1024])
    if header[0] != 20240520 or header[1] != 1 or len(data) != 1024 + 2 * header[2]:
        sys.exit(f"FAIL: {path}: not an llm.c shard (header {header[:3]}, {len(data)} bytes)")
    return list(struct.unpack(f"<{header[2]}H", data[1024:]))


def split_on(ids, eot):
    """The documents' ids: each must start with eot."""
    if not ids or ids[0] != eot:
        sys.exit(f"FAIL: the shard does not start with <|endoftext|> ({ids[:3]})")
    docs, cur = [], None
    for i in ids:
        if i == eot:
            if cur is not None:
                docs.append(cur)
            cur = []
        else:
            cur.append(i)
    docs.append(cur)
    return docs


def main():
    args = parse_args()
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    w = args.workdir
    documents = write_corpus(os.path.join(w, "a.txt"), 150, 1)
    documents += write_corpus(os.path.join(w, "b.txt"), 50, 2, final_newline=False)
    out = os.path.join(w, "out")
    line, _ = prepare([os.path.join(w, "a.txt"), os.path.join(w, "b.txt"), "--out", out, "--vocab-size", 500,
                       "--val-fraction", 0.05, "--shard-tokens", 2000])
    if not line.startswith("prepared ") or "tokens/s" not in line:
        sys.exit(f"FAIL: the closing line: {line}")
    tok = Tokenizer.from_file(os.path.join(out, "tokenizer.json"))
    eot = tok.token_to_id("<|endoftext|>")
    if eot != 0:
        sys.exit(f"FAIL: <|endoftext|> is id {eot}, not 0")
    shards = sorted(glob.glob(os.path.join(out, "train_*.bin")))
    train = [i for s in shards for i in read_shard(s)]
    val = read_shard(os.path.join(out, "val_000000.bin"))
    if len(shards) < 2 or any(len(read_shard(s)) != 2000 for s in shards[:-1]):
        sys.exit(f"FAIL: --shard-tokens 2000: {[len(read_shard(s)) for s in shards]}")
    n_val = math.ceil(0.05 * len(documents))
    got = [tok.decode(d) for d in split_on(train, eot) + split_on(val, eot)]
    if got != documents or len(split_on(val, eot)) != n_val:
        bad = next(i for i in range(min(len(got), len(documents))) if got[i] != documents[i]) \
            if got[:len(documents)] != documents[:len(got)] else None
        sys.exit(f"FAIL: {len(got)} documents decoded for {len(documents)} written ({n_val} val); first that "
                 f"differs: {bad}: {got[bad] if bad is not None else ''!r} vs {documents[bad] if bad is not None else ''!r}")
    print(f"trained: {len(train)} train ids in {len(shards)} shards, {len(val)} val ids ({n_val} documents): every "
          "document once, after <|endoftext|>, decoded to its own text")

    # The trainer reads the shards (the vocabulary given as the model's).
    run([args.nobubble, "train", "--data", os.path.join(out, "train_*.bin"), "--model", "tiny", "--num-layers", 2,
         "--hidden-size", 64, "--num-attention-heads", 4, "--ffn-hidden-size", 96, "--vocab-size",
         tok.get_vocab_size(), "--seq-length", 32, "--micro-batch-size", 2, "--lr", 1e-3, "--train-iters", 2,
         "--eval-iters", 1])
    print("nobubble train reads the shards")

    # 2. An existing tokenizer applied: the library's own ids.
    again = os.path.join(w, "again")
    prepare([os.path.join(w, "a.txt"), "--out", again, "--tokenizer", os.path.join(out, "tokenizer.json")])
    ids = read_shard(os.path.join(again, "train_000000.bin")) + read_shard(os.path.join(again, "val_000000.bin"))
    want = [i for d in documents[:150] for i in [eot] + tok.encode(d, add_special_tokens=False).ids]
    if ids != want:
        sys.exit(f"FAIL: --tokenizer: {len(ids)} ids, the library's encode {len(want)}")
    print(f"--tokenizer: {len(ids)} ids, the library's own encode of each document")

    # 3. Bad input.
    def refused(flags, words):
        _, err = prepare(flags, expect_rc=2)
        lines = err.strip().splitlines()
        if len(lines) != 1 or not lines[0].startswith("prepare_tokens: error: ") or words not in lines[0]:
            sys.exit(f"FAIL: {flags}: expected one error line with '{words}', got {err!r}")
        print(f"refused: {lines[0]}")

    empty = os.path.join(w, "empty.txt")
    with open(empty, "w") as f:
        f.write("\n  \n\t\n")
    one = os.path.join(w, "one.txt")
    with open(one, "w") as f:
        f.write("a single document\nof two lines\n")
    refused([empty, "--out", os.path.join(w, "x"), "--vocab-size", 300], "no text")
    refused([one, "--out", os.path.join(w, "x"), "--vocab-size", 300], "need 2")
    refused([one, "--out", os.path.join(w, "x"), "--vocab-size", 70000], "uint16")
    refused([os.path.join(w, "missing.txt"), "--out", os.path.join(w, "x"), "--vocab-size", 300], "no such")
    wordpiece = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    wordpiece.pre_tokenizer = pre_tokenizers.Whitespace()
    wordpiece.train_from_iterator(documents, trainers.WordPieceTrainer(vocab_size=200, special_tokens=["[UNK]"],
                                                                       show_progress=False))
    wordpiece.save(os.path.join(w, "wordpiece.json"))
    refused([os.path.join(w, "a.txt"), "--out", os.path.join(w, "x"), "--tokenizer",
             os.path.join(w, "wordpiece.json")], "WordPiece")
    no_eot = Tokenizer(models.BPE())
    no_eot.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    no_eot.train_from_iterator(documents, trainers.BpeTrainer(vocab_size=300, show_progress=False,
                                                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    no_eot.save(os.path.join(w, "no_eot.json"))
    refused([os.path.join(w, "a.txt"), "--out", os.path.join(w, "x"), "--tokenizer", os.path.join(w, "no_eot.json")],
            "<|endoftext|>")
    print("ok")


if __name__ == "__main__":
    main()

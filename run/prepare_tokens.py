#!/usr/bin/env python3
"""Text files into llm.c token shards, with the byte-level BPE tokenizer that made them (docs/formats.md, "Data and
batches": token shards from text).

    build/venv/bin/python run/prepare_tokens.py TEXT_FILES... --out DIR --vocab-size V
    build/venv/bin/python run/prepare_tokens.py TEXT_FILES... --out DIR --tokenizer tokenizer.json

Trains a byte-level BPE of V ids with Hugging Face `tokenizers` (pinned in run/requirements-hf.txt, `make hf-venv`)
on the text, or applies an existing tokenizer.json (SmolLM's included), and writes
    DIR/train_000000.bin, train_000001.bin, ...   llm.c shards (uint16 ids) of at most --shard-tokens tokens
    DIR/val_000000.bin                            the validation documents
    DIR/tokenizer.json                            the tokenizer, beside the shards that it made
The rules:
  - a document is a run of lines between empty lines (one or more lines holding only whitespace end it); each file
    ends a document too. Lines keep their newlines; the empty lines between documents are not part of either;
  - every document is preceded by the end-of-text id, `<|endoftext|>` (id 0 of a trained tokenizer; an existing
    tokenizer must have that token), as llm.c and GPT-2 delimit documents;
  - the validation documents are the last ceil(--val-fraction x documents) of them, in input order (at least one;
    at least one document is left to train on);
  - ids must fit uint16: a vocabulary above 65536 is refused, with one error line, not truncated.
Encoding runs on every core (the library's thread pool; RAYON_NUM_THREADS limits it). Ends with one line: the
tokens written and tokens per second. Bad input (no text, a vocabulary too large, a tokenizer.json that is not a
byte-level BPE, a missing file): one line `prepare_tokens: error: ...` and exit 2.
"""
import argparse
import math
import os
import struct
import sys
import time

LLMC_MAGIC = 20240520  # src/data/token_files.h: the shard header
LLMC_VERSION = 1  # uint16 ids
HEADER_INTS = 256
MAX_UINT16_IDS = 65536
EOT = "<|endoftext|>"
ENCODE_BATCH_DOCUMENTS = 4096


class UsageError(Exception):
    pass


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("text_files", nargs="+", help="UTF-8 text files (documents separated by empty lines)")
    p.add_argument("--out", required=True, help="the folder for the shards and tokenizer.json (made if missing)")
    how = p.add_mutually_exclusive_group(required=True)
    how.add_argument("--vocab-size", type=int, help="train a byte-level BPE of this many ids (<= 65536)")
    how.add_argument("--tokenizer", help="apply this tokenizer.json instead (a byte-level BPE with <|endoftext|>)")
    p.add_argument("--val-fraction", type=float, default=0.01,
                   help="the share of documents, the last ones, kept for validation (0.01)")
    p.add_argument("--shard-tokens", type=int, default=100_000_000, help="tokens per train shard (100000000)")
    p.add_argument("--min-frequency", type=int, default=2, help="BPE: merge pairs seen at least this often (2)")
    args = p.parse_args(argv)
    if args.vocab_size is not None and not 257 <= args.vocab_size <= MAX_UINT16_IDS:
        raise UsageError(f"--vocab-size {args.vocab_size}: a byte-level BPE needs 257 ids (256 bytes and "
                         f"{EOT}) and llm.c shards hold uint16 ids, at most {MAX_UINT16_IDS}")
    if not 0 < args.val_fraction < 1:
        raise UsageError(f"--val-fraction {args.val_fraction} must be between 0 and 1")
    if args.shard_tokens < 1:
        raise UsageError(f"--shard-tokens {args.shard_tokens} must be positive")
    return args


def read_documents(paths):
    """The documents of every file in order (the rule above)."""
    documents = []
    for path in paths:
        try:
            with open(path, encoding="utf-8", errors="strict", newline="") as f:
                text = f.read()
        except FileNotFoundError:
            raise UsageError(f"no such text file '{path}'")
        except UnicodeDecodeError as e:
            raise UsageError(f"'{path}' is not UTF-8 text (byte {e.start}: {e.reason})")
        lines = []
        for line in text.splitlines(keepends=True):
            if line.strip():
                lines.append(line)
            elif lines:
                documents.append("".join(lines))
                lines = []
        if lines:
            documents.append("".join(lines))
    if not documents:
        raise UsageError(f"no text in {', '.join(paths)}: every line is empty")
    if len(documents) < 2:
        raise UsageError(f"{len(documents)} document in {', '.join(paths)}: need 2 (one to validate on); documents "
                         "are separated by empty lines")
    return documents


def train_tokenizer(documents, vocab_size, min_frequency):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=[EOT],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=sys.stderr.isatty())
    tok.train_from_iterator(documents, trainer=trainer, length=len(documents))
    return tok


def load_tokenizer(path):
    from tokenizers import Tokenizer
    import json
    try:
        with open(path, encoding="utf-8") as f:
            spec = json.load(f)
        tok = Tokenizer.from_file(path)
    except FileNotFoundError:
        raise UsageError(f"--tokenizer '{path}': no such file")
    except Exception as e:  # the library's own parse errors
        raise UsageError(f"--tokenizer '{path}' is not a tokenizer.json: {str(e).splitlines()[0]}")
    kind = (spec.get("model") or {}).get("type")
    byte_level = "ByteLevel" in json.dumps(spec.get("pre_tokenizer")) or "ByteLevel" in json.dumps(spec.get("decoder"))
    if kind != "BPE":
        raise UsageError(f"--tokenizer '{path}' is a {kind} tokenizer: a byte-level BPE is needed")
    if not byte_level:
        raise UsageError(f"--tokenizer '{path}' is a BPE without byte-level pre-tokenization: a byte-level BPE is "
                         "needed")
    if tok.get_vocab_size() > MAX_UINT16_IDS:
        raise UsageError(f"--tokenizer '{path}' has {tok.get_vocab_size()} ids: llm.c shards hold uint16 ids, at most "
                         f"{MAX_UINT16_IDS}")
    if tok.token_to_id(EOT) is None:
        raise UsageError(f"--tokenizer '{path}' has no {EOT} token to put between documents")
    return tok


def write_shard(path, ids):
    """An llm.c shard, written to PATH.tmp and renamed over PATH: never half-written."""
    header = [0] * HEADER_INTS
    header[0], header[1], header[2] = LLMC_MAGIC, LLMC_VERSION, len(ids)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack(f"<{HEADER_INTS}i", *header))
        f.write(struct.pack(f"<{len(ids)}H", *ids))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class ShardWriter:
    """Fills shards named PREFIX_000000.bin, ... of at most `limit` tokens."""

    def __init__(self, out, prefix, limit):
        self.out, self.prefix, self.limit = out, prefix, limit
        self.buffer, self.shards, self.tokens = [], 0, 0

    def add(self, ids):
        self.buffer.extend(ids)
        self.tokens += len(ids)
        while len(self.buffer) >= self.limit:
            self._flush(self.buffer[:self.limit])
            self.buffer = self.buffer[self.limit:]

    def close(self):
        if self.buffer or self.shards == 0:
            self._flush(self.buffer)
        self.buffer = []

    def _flush(self, ids):
        write_shard(os.path.join(self.out, f"{self.prefix}_{self.shards:06d}.bin"), ids)
        self.shards += 1


def encode_into(tok, documents, writer, eot_id, progress):
    """Each document as EOT + its ids, in order, batch by batch (encode_batch runs on every core)."""
    for start in range(0, len(documents), ENCODE_BATCH_DOCUMENTS):
        batch = documents[start:start + ENCODE_BATCH_DOCUMENTS]
        for encoding in tok.encode_batch(batch, add_special_tokens=False):
            writer.add([eot_id] + encoding.ids)
        progress(len(batch))


def main(argv):
    args = parse_args(argv)
    started = time.perf_counter()
    documents = read_documents(args.text_files)
    tok = train_tokenizer(documents, args.vocab_size, args.min_frequency) if args.vocab_size \
        else load_tokenizer(args.tokenizer)
    eot_id = tok.token_to_id(EOT)
    os.makedirs(args.out, exist_ok=True)
    n_val = min(len(documents) - 1, max(1, math.ceil(args.val_fraction * len(documents))))
    train_docs, val_docs = documents[:len(documents) - n_val], documents[len(documents) - n_val:]
    total_bytes = sum(len(d) for d in documents)
    done = [0]

    def progress(n):  # on a terminal, or for inputs over 50 MB: a line every batch
        done[0] += n
        if sys.stderr.isatty() or total_bytes > 50_000_000:
            print(f"\rencoded {done[0]}/{len(documents)} documents", end="", file=sys.stderr, flush=True)

    train = ShardWriter(args.out, "train", args.shard_tokens)
    val = ShardWriter(args.out, "val", sys.maxsize)  # one shard
    encode_into(tok, train_docs, train, eot_id, progress)
    encode_into(tok, val_docs, val, eot_id, progress)
    train.close()
    val.close()
    if done[0] and (sys.stderr.isatty() or total_bytes > 50_000_000):
        print(file=sys.stderr)
    tok.save(os.path.join(args.out, "tokenizer.json"))
    seconds = time.perf_counter() - started
    tokens = train.tokens + val.tokens
    print(f"prepared {tokens} tokens ({train.tokens} train in {train.shards} shard(s), {val.tokens} val from "
          f"{len(val_docs)} of {len(documents)} documents) in {seconds:.1f} s: {tokens / seconds:.0f} tokens/s; "
          f"{os.path.join(args.out, 'tokenizer.json')}: {tok.get_vocab_size()} ids, {EOT} = {eot_id}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except UsageError as e:
        print(f"prepare_tokens: error: {e}", file=sys.stderr)
        sys.exit(2)

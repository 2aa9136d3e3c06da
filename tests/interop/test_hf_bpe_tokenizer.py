"""`nobubble tokenize` (src/data/bpe_tokenizer.h) against Hugging Face `tokenizers`, id for id (issue 40).

Four byte-level BPEs, each trained here on a generated corpus (no network):
  corpus  run/prepare_tokens.py's (ByteLevel, add_prefix_space=False, <|endoftext|> id 0);
  smollm  SmolLM's kind: Sequence[Digits(individual_digits=True), ByteLevel(add_prefix_space=False)], special tokens
          <|im_start|> <|im_end|>, and two normal added tokens: "<tool>" (lstrip, rstrip) and "xyzzy" (normalized);
  gpt2    GPT-2's kind: ByteLevel(add_prefix_space=True), its merges written as "a b" strings (the older form);
  variant the corpus one edited: ignore_merges, Sequence[Digits(individual_digits=False), ByteLevel(add_prefix_space=
          True, use_regex=False)].
1. encode: the held-out validation text, adversarial strings (ill-formed UTF-8, compared with tokenizers' encode of
   bytes.decode('utf-8', 'replace'); emoji with ZWJ and skin tones; runs of white space; CJK; digits; contractions;
   added tokens inside text; combining marks; control characters; the empty string) and random strings drawn from
   all of those: `nobubble tokenize --text-file` equals encode(text, add_special_tokens=False).ids.
2. decode: random id sequences: nobubble's bytes, read as UTF-8 with replacement, equal decode(ids,
   skip_special_tokens=False) (the library's ByteLevel decoder is lossy on ill-formed UTF-8, so the comparison is
   made after the same replacement); valid text round-trips to its exact bytes.
3. Bad input: a WordPiece tokenizer.json, a Split pre-tokenizer, a file that is not JSON, a missing file, an id out
   of range: one error line each, exit 2.
"""
import json
import os
import random
import subprocess
import sys
import time

from hf_common import parse_args, RUN_TIMEOUT_S

HERE = os.path.dirname(os.path.abspath(__file__))
PREPARE = os.path.join(HERE, "..", "..", "run", "prepare_tokens.py")
EOT = "<|endoftext|>"

WORDS = ["alpha", "Beta", "gamma", "épsilon", "naïve", "😀", "日本語", "中文", "한국어", "  ", "\t", "x" * 40, "end.",
         "it's", "we're", "I'M", "you'll", "12345", "3.14", "2024", "١٢٣", "½", "café", "e\u0301", "👍🏽",
         "👨\u200d👩\u200d👧", "-->", "(x)", "don't", "¿qué?", "Ωμέγα", "\u00a0", "résumé", "ß", "ﬁ"]

ADVERSARIAL = [
    "", " ", "a", "hello world", " leading space", "trailing spaces   ", "  \n  \n", "\n\n\n", "a\t\tb", "\t\n\r\n  x",
    " " * 50 + "y", "x" + " " * 17, "   ", "\r\n", "tab\there\t", "many    spaces    between",
    "it's don't we're they've I'm you'll he'd IT'S 'S 's '' 'll' 're've", "'", "''s", "O'Neil's",
    "1234567890 3.14159 2024-05-20 ١٢٣٤ ²³ ½ Ⅻ 0x1F", "000111222",
    "Unicode 15 digits: \U00011F50\U00011F51 \U0001D2C0x\U0001D2D3 a\U0001E4F0\U0001E4F9", "a1b2c3", " 42 ",
    "👍🏽 👨\u200d👩\u200d👧\u200d👦 🏳️\u200d🌈 😀😀 🇯🇵", "👍🏿👍🏻",
    "日本語のテキスト、中文。한국어 文字", "ｆｕｌｌｗｉｄｔｈ　ｓｐａｃｅ",
    "e\u0301 a\u0308\u0323 Z\u0324\u0354\u0367\u0311 \u0301start", "\u0915\u094d\u0937",
    "\x00\x01\x1c\x1d\x1e\x1f\x7f\x85 \u00a0 \u2028\u2029\u3000x\u180ey\u200bz\u2009w",
    "\x0b\x0c vertical", "\x00", "a\x00b",
    f"before{EOT}after", f"{EOT}{EOT}", f" {EOT} ", "<|endoftext|", f"x {EOT}\n", f"<|{EOT}|>",
    "<|im_start|>user\nhi there<|im_end|>\n<|im_start|>assistant\n", "a  <tool>  b", "<tool><tool>", " \n<tool>\n ",
    "xyzzyxyzzy", "plugh xyzzy.", "<|im_start|>xyzzy<tool>",
    "Ωμέγα naïve café ß ﬁ ǅ", "ǅungla", "\u2163 \u3007",
]

INVALID_UTF8 = [
    b"\xff\xfe abc \xe2\x82 \xed\xa0\x80 \xc0\xaf \xf0\x9f\x98 end\x80",
    b"\xe2\x82A", b"\x80", b"\xc2", b"ok\xf4\x90\x80\x80", b"\xf0\x9f\x98\x80\xf0\x9f\x98",
    b"a\xe0\x80\x80b", b"<|endoftext|>\xff<|endoftext|>", b"\xef\xbf\xbd real replacement", b"  \xa0 x",
]


def nobubble_run(nobubble, args, expect_rc=0):
    """nobubble's stdout as bytes; stderr as text. A different exit code fails the test."""
    cmd = [str(nobubble), *map(str, args)]
    p = subprocess.run(cmd, capture_output=True, timeout=RUN_TIMEOUT_S)
    if expect_rc is not None and p.returncode != expect_rc:
        sys.exit(f"FAIL: exit {p.returncode} (expected {expect_rc}): {cmd}\n{p.stdout[:2000]!r}\n{p.stderr.decode()}")
    return p.stdout, p.stderr.decode("utf-8", "replace")


def write_corpus(path, n_documents, seed):
    """Documents of 1-4 lines of random WORDS, separated by empty lines; the text."""
    r = random.Random(seed)
    documents = []
    for d in range(n_documents):
        lines = [" ".join(r.choice(WORDS) for _ in range(r.randint(1, 12))) + "\n" for _ in range(r.randint(1, 4))]
        documents.append("".join(lines))
    text = "\n".join(documents)
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write(text)
    return text


def random_strings(count, seed):
    """Strings drawn from the characters of WORDS and ADVERSARIAL, runs of white space and added tokens."""
    r = random.Random(seed)
    pool = sorted(set("".join(WORDS + ADVERSARIAL)))
    pieces = pool + [" ", " ", "  ", "\n", " \n", "\t", EOT, "<tool>", "xyzzy", "'s", "'t", "'re"]
    return ["".join(r.choice(pieces) for _ in range(r.randint(0, 120))) for _ in range(count)]


def train_tokenizers(workdir, corpus_text, corpus_path):
    """The four tokenizer.json files, by name; each with the library's Tokenizer for it."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    out = os.path.join(workdir, "prepared")
    p = subprocess.run([sys.executable, PREPARE, corpus_path, "--out", out, "--vocab-size", "700", "--val-fraction",
                        "0.1"], capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    if p.returncode != 0:
        sys.exit(f"FAIL: prepare_tokens.py: {p.stdout}\n{p.stderr}")
    paths = {"corpus": os.path.join(out, "tokenizer.json")}

    def trained(pre_tokenizer, special):
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizer
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=800, special_tokens=special, show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        tok.train_from_iterator(corpus_text.split("\n\n"), trainer=trainer)
        return tok

    smollm = trained(pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                              pre_tokenizers.ByteLevel(add_prefix_space=False)]),
                     [EOT, "<|im_start|>", "<|im_end|>"])
    smollm.add_tokens([AddedToken("<tool>", lstrip=True, rstrip=True, normalized=False),
                       AddedToken("xyzzy", normalized=True)])
    paths["smollm"] = os.path.join(workdir, "smollm.json")
    smollm.save(paths["smollm"])

    gpt2 = trained(pre_tokenizers.ByteLevel(add_prefix_space=True), [EOT])
    spec = json.loads(gpt2.to_str())
    spec["model"]["merges"] = [" ".join(m) for m in spec["model"]["merges"]]
    paths["gpt2"] = os.path.join(workdir, "gpt2.json")
    with open(paths["gpt2"], "w") as f:
        json.dump(spec, f)

    spec = json.load(open(paths["corpus"]))
    spec["model"]["ignore_merges"] = True
    spec["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Digits", "individual_digits": False},
        {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": False}]}
    paths["variant"] = os.path.join(workdir, "variant.json")
    with open(paths["variant"], "w") as f:
        json.dump(spec, f)
    return {name: (path, Tokenizer.from_file(path)) for name, path in paths.items()}


def check_encode(nobubble, workdir, name, path, tok, cases):
    """Each case (bytes) encoded by nobubble from a file, against the library on its replaced text."""
    text_path = os.path.join(workdir, "case.txt")
    for label, data in cases:
        with open(text_path, "wb") as f:
            f.write(data)
        out, _ = nobubble_run(nobubble, ["tokenize", "--tokenizer", path, "--text-file", text_path])
        ours = [int(w) for w in out.split()]
        theirs = tok.encode(data.decode("utf-8", "replace"), add_special_tokens=False).ids
        if ours != theirs:
            first = next((i for i in range(min(len(ours), len(theirs))) if ours[i] != theirs[i]),
                         min(len(ours), len(theirs)))
            sys.exit(f"FAIL: {name}: encode of {label} {data[:200]!r}: {len(ours)} ids, tokenizers {len(theirs)}; "
                     f"first difference at {first}: ours {ours[first:first + 8]}, tokenizers {theirs[first:first + 8]}"
                     f" ({[tok.id_to_token(i) for i in theirs[first:first + 8]]})")
    print(f"{name}: {len(cases)} texts encode id for id as tokenizers")


def check_decode(nobubble, name, path, tok, seed):
    """Random id sequences: nobubble's bytes against the library's lossy decode; valid text round-trips exactly."""
    r = random.Random(seed)
    vocab = tok.get_vocab_size()
    for n in range(30):
        ids = [r.randrange(vocab) for _ in range(r.randint(1, 40))]
        out, _ = nobubble_run(nobubble, ["tokenize", "--tokenizer", path, "--decode", " ".join(map(str, ids))])
        theirs = tok.decode(ids, skip_special_tokens=False)
        if out.decode("utf-8", "replace") != theirs:
            sys.exit(f"FAIL: {name}: decode {ids}: ours {out!r}, tokenizers {theirs!r}")
    text = "round trip: naïve 😀 日本語 it's 12345\n\t x" + EOT
    ids = tok.encode(text, add_special_tokens=False).ids
    out, _ = nobubble_run(nobubble, ["tokenize", "--tokenizer", path, "--decode", " ".join(map(str, ids))])
    exact = name in ("corpus", "smollm")  # add_prefix_space puts a space before the text and after EOT
    if exact and out != text.encode():
        sys.exit(f"FAIL: {name}: decode(encode(text)) = {out!r}, not {text!r}")
    round_trip = "exact" if exact else "not checked (prefix space)"
    print(f"{name}: 30 random id sequences decode as tokenizers; round trip {round_trip}")


def check_refused(nobubble, workdir, tokenizers):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    def refused(path, words, extra=("--text", "x")):
        _, err = nobubble_run(nobubble, ["tokenize", "--tokenizer", path, *extra], expect_rc=2)
        lines = err.strip().splitlines()
        if len(lines) != 1 or words not in lines[0]:
            sys.exit(f"FAIL: {path}: expected one error line with '{words}', got {err!r}")
        print(f"refused: {lines[0]}")

    wordpiece = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    wordpiece.pre_tokenizer = pre_tokenizers.Whitespace()
    wordpiece.train_from_iterator(["some words to train on", "and more words"],
                                  trainers.WordPieceTrainer(vocab_size=100, special_tokens=["[UNK]"],
                                                            show_progress=False))
    wordpiece.save(os.path.join(workdir, "wordpiece.json"))
    refused(os.path.join(workdir, "wordpiece.json"), "is a WordPiece tokenizer: a byte-level BPE is needed")
    spec = json.load(open(tokenizers["corpus"][0]))
    spec["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "\\s+"}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}]}
    with open(os.path.join(workdir, "split.json"), "w") as f:
        json.dump(spec, f)
    refused(os.path.join(workdir, "split.json"), "pre-tokenizer Split is not implemented")
    spec = json.load(open(tokenizers["corpus"][0]))
    spec["normalizer"] = {"type": "NFC"}
    with open(os.path.join(workdir, "nfc.json"), "w") as f:
        json.dump(spec, f)
    refused(os.path.join(workdir, "nfc.json"), "normalizer NFC is not implemented")
    with open(os.path.join(workdir, "not_json.json"), "w") as f:
        f.write("this is { not json")
    refused(os.path.join(workdir, "not_json.json"), "JSON")
    refused(os.path.join(workdir, "missing.json"), "missing.json")
    refused(tokenizers["corpus"][0], "not in the tokenizer's vocabulary", ("--decode", "1 2 999999"))
    refused(tokenizers["corpus"][0], "exactly one of", ("--text", "x", "--decode", "1"))


def measure_speed(nobubble, workdir, path, text):
    """Encode speed, one core, the whole tool (startup and tokenizer.json included): MB/s."""
    big = os.path.join(workdir, "big.txt")
    data = (text.encode() * (4_000_000 // len(text.encode()) + 1))[:4_000_000]
    with open(big, "wb") as f:
        f.write(data)
    start = time.perf_counter()
    nobubble_run(nobubble, ["tokenize", "--tokenizer", path, "--text-file", big])
    seconds = time.perf_counter() - start
    print(f"encode speed: {len(data) / 1e6:.1f} MB in {seconds:.2f} s, {len(data) / 1e6 / seconds:.2f} MB/s")


def main():
    args = parse_args()
    w = args.workdir
    corpus_path = os.path.join(w, "corpus.txt")
    corpus_text = write_corpus(corpus_path, 400, 1)
    validation = write_corpus(os.path.join(w, "validation.txt"), 60, 2).encode()  # held out: not trained on
    tokenizers = train_tokenizers(w, corpus_text, corpus_path)
    cases = [("the held-out validation text", validation)]
    cases += [(f"adversarial[{i}]", s.encode()) for i, s in enumerate(ADVERSARIAL)]
    cases += [(f"ill-formed[{i}]", b) for i, b in enumerate(INVALID_UTF8)]
    cases += [(f"random[{i}]", s.encode()) for i, s in enumerate(random_strings(60, 3))]
    for name, (path, tok) in tokenizers.items():
        check_encode(args.nobubble, w, name, path, tok, cases)
        check_decode(args.nobubble, name, path, tok, 4)
    check_refused(args.nobubble, w, tokenizers)
    measure_speed(args.nobubble, w, tokenizers["smollm"][0], validation.decode())
    print("ok")


if __name__ == "__main__":
    main()

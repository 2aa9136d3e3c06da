"""Export, import, export gives the same bytes; a run continued from an import equals the same run continued
from the checkpoint, bit for bit (issue 38, 7c; docs/interop.md).

1. A trained checkpoint (untied GQA at P = 2; tied at P = 1) exported (float32, and bfloat16) to A, then A imported
   and exported again (`nobubble export --hf A`) to B: every file of B is A's, byte for byte.
2. Continuing: an import starts with a fresh optimizer, so the run it is compared with is the checkpoint's
   weights continued with a fresh optimizer too: `train --pretrained-checkpoint CKPT` (Megatron's flag: the
   checkpoint's newest master weights, step 0, fresh optimizer state, the data from the start) against
   `train --init-from-hf A` with the same flags (its shape from config.json). Both print the same final weights
   and optimizer state sha256 at P = 3, and at P = 1 (1f1b's final weights do not depend on the cut).
"""
import os
import sys

from hf_common import Data, final_hashes, folder_bytes, parse_args, run

GQA = ["--model", "tiny", "--num-layers", "3", "--hidden-size", "64", "--num-attention-heads", "4",
       "--num-query-groups", "2", "--ffn-hidden-size", "160"]
RUN = ["--seq-length", 32, "--micro-batch-size", 2, "--num-microbatches", 2, "--eval-iters", 1]


def same_folders(a, b):
    fa, fb = folder_bytes(a), folder_bytes(b)
    if fa != fb:
        differ = sorted(n for n in set(fa) | set(fb) if fa.get(n) != fb.get(n))
        sys.exit(f"FAIL: {a} and {b} differ in {differ}")
    print(f"export, import, export: {sorted(fa)} byte for byte ({sum(map(len, fa.values()))} bytes)")


def roundtrip(args, save, name, dtype):
    a = os.path.join(args.workdir, f"{name}_{dtype}_a")
    b = os.path.join(args.workdir, f"{name}_{dtype}_b")
    run([args.nobubble, "export", "--load", save, "--out", a, "--dtype", dtype])
    run([args.nobubble, "export", "--hf", a, "--out", b, "--dtype", dtype])
    same_folders(a, b)
    return a


def continued(args, data, source_flags, stages):
    out = run([args.nobubble, "train", *source_flags, *data.flags, *RUN, "--stages", stages, "--train-iters", 3,
               "--lr", 3e-3, "--optimizer", "adamw"])
    return final_hashes(out)


def main():
    args = parse_args()
    data = Data(args.workdir)
    untied = os.path.join(args.workdir, "untied")
    run([args.nobubble, "train", *GQA, *data.flags, *RUN, "--stages", 2, "--train-iters", 3, "--lr", 3e-3,
         "--save", untied, "--save-interval", 3])
    tied = os.path.join(args.workdir, "tied")
    run([args.nobubble, "train", *GQA, "--tie-embeddings", *data.flags, *RUN, "--train-iters", 3, "--lr", 3e-3,
         "--save", tied, "--save-interval", 3])
    exported = roundtrip(args, untied, "untied", "float32")
    roundtrip(args, untied, "untied", "bfloat16")
    roundtrip(args, tied, "tied", "float32")
    for stages in (3, 1):
        from_checkpoint = continued(args, data, [*GQA, "--pretrained-checkpoint", untied], stages)
        from_import = continued(args, data, ["--init-from-hf", exported], stages)
        print(f"P = {stages}: --pretrained-checkpoint {from_checkpoint}\n        --init-from-hf {from_import}")
        if from_checkpoint != from_import:
            sys.exit(f"FAIL: at P = {stages} the run from the import is not the run from the checkpoint")
    print("PASS")


if __name__ == "__main__":
    main()

"""What the case-by-case oracles share (test_moe_layer.py, test_moe_bias.py): the command line, running the dump
program (tests/oracle/dump_files.h, dump_cases_main), checking each case it lists, and the summary.

    /usr/bin/python3 tests/oracle/test_<name>.py --dump <dump_<name>> --nobubble <ignored> --workdir <dir>
"""
import json
import os
import subprocess

from optim_oracle import parse_args  # the oracles' common flags (--dump, --nobubble, --workdir)
from test_model import Report


def run_cases(run_case, min_cases):
    """run_case(workdir, case, report) for every case the dump wrote; the exit code (1 on any failure, or when
    fewer than min_cases were written)."""
    args = parse_args(__doc__)
    subprocess.run([args.dump, "--workdir", args.workdir], check=True)
    with open(os.path.join(args.workdir, "cases.json")) as f:
        cases = json.load(f)
    report = Report()
    for case in cases:
        run_case(args.workdir, case, report)
    print()
    width = max(len(c) for c in cases) if cases else 0
    for (case, category), err in sorted(report.worst.items()):
        print(f"max rel err {case:{width}s} {category:5s} {err:.3e}")
    print(f"{report.passed} passed, {report.failed} failed")
    return 1 if report.failed or len(cases) < min_cases else 0

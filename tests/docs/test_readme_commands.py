#!/usr/bin/env python3
"""The README's commands are the ones CI runs, and the Makefile has them.

  1. the README's "The two commands" section has a code block with `make run` and `make test`;
  2. its test command is the command .ci/run runs (its one line that is not a comment, `set` or `cd`);
  3. `run` and `test`, and every other `make TARGET` that a tracked .md file names (in backticks or a code
     block), are targets of the Makefile.
Usage: test_readme_commands.py [REPO_ROOT]"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import doclib  # noqa: E402


def read(root, path):
    with open(os.path.join(root, path), encoding="utf-8") as fh:
        return fh.read()


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", ".."))
    rep = doclib.Report()
    for p in ("README.md", ".ci/run", "Makefile"):
        if not os.path.isfile(os.path.join(root, p)):
            rep.fail(f"{p} is missing")
            rep.finish()
    readme = read(root, "README.md")

    # 1. The two commands.
    heads = [(no, h) for no, lvl, h in doclib.headings(readme) if lvl == 2]
    start = next((no for no, h in heads if h.lower().startswith("the two commands")), None)
    if start is None:
        rep.fail("README.md has no '## The two commands' section")
        rep.finish()
    end = next((no for no, h in heads if no > start), 10**9)
    commands = [(no, line.split("#")[0].strip()) for no, line in doclib.code_block_lines(readme)
                if start < no < end and line.split("#")[0].strip()]
    names = [c for _, c in commands]
    if names[:2] == ["make run", "make test"] and len(names) == 2:
        rep.ok("README.md's two commands are `make run` and `make test`")
    else:
        rep.fail(f"README.md:{start}: 'The two commands' should be `make run` and `make test`, found {names}")
    readme_test = next(((no, c) for no, c in commands if re.match(r"make\b.*\btest\b", c)), None)

    # 2. The same test command as CI.
    ci = [(no, line.strip()) for no, line in enumerate(read(root, ".ci/run").split("\n"), 1)
          if line.strip() and not line.strip().startswith("#") and not re.match(r"(set|cd)\s", line.strip())]
    if len(ci) != 1:
        rep.fail(f".ci/run should run one command, found {[c for _, c in ci]}")
    elif readme_test is None:
        rep.fail(f"README.md:{start}: 'The two commands' has no test command (.ci/run runs '{ci[0][1]}')")
    elif readme_test[1] != ci[0][1]:
        rep.fail(f"README.md:{readme_test[0]}: the test command '{readme_test[1]}' is not what CI runs "
                 f"(.ci/run:{ci[0][0]}: '{ci[0][1]}')")
    else:
        rep.ok(f"README.md's test command '{readme_test[1]}' is what .ci/run runs")

    # 3. The Makefile has every target the docs name.
    targets = set()
    for line in read(root, "Makefile").split("\n"):
        m = re.match(r"^([A-Za-z0-9_.-]+(?:\s+[A-Za-z0-9_.-]+)*)\s*:(?![=:])", line)
        if m:
            targets.update(m.group(1).split())
    wanted = [("README.md", start, "run"), ("README.md", start, "test")]
    how, files = doclib.repo_files(root)
    for f in (f for f in files if f.endswith(".md")):
        md = read(root, f)
        for no, line in doclib.lines_outside_code(md):
            wanted += [(f, no, t) for t in re.findall(r"`make ([a-z][\w-]*)", line)]
        for no, line in doclib.code_block_lines(md):
            wanted += [(f, no, t) for t in re.findall(r"(?:^|[;&|]\s*)make ([a-z][\w-]*)", line.strip())]
    bad = 0
    for f, no, t in wanted:
        if t not in targets:
            bad += 1
            rep.fail(f"{f}:{no}: `make {t}` is not a target of the Makefile")
    if bad == 0:
        rep.ok(f"the Makefile has every target the .md files name ({len(set(t for _, _, t in wanted))}: "
               f"{' '.join(sorted(set(t for _, _, t in wanted)))})")
    rep.finish()


if __name__ == "__main__":
    main()

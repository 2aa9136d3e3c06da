#!/usr/bin/env python3
"""docs/cli.md and the program name the same flags and subcommands.

  1. every flag that `nobubble --help-all` lists (and, for a subcommand with subcommands of its own such as
     `bench`, that `nobubble bench ops --help` ... list) appears in backticks in docs/cli.md;
  2. every backticked `--flag` in a table row of docs/cli.md is a flag of the subcommand whose section holds
     the row (a heading naming it in backticks: `train`, `bench ops`; a section naming none, such as
     "Model flags", may hold any subcommand's flags; "Top-level options" holds the program's own);
  3. every subcommand has a section: a heading with `NAME` (or `nobubble NAME`) in backticks;
  4. every `nobubble SUB ...` command in a code block of a tracked .md file, and every TRAIN_ARGS="..." there,
     uses only flags of that subcommand.
Usage: test_cli_docs.py NOBUBBLE [REPO_ROOT]"""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import doclib  # noqa: E402

CLI_MD = "docs/cli.md"
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
OPTION_LINE = re.compile(r"^\s+(-\w,)?(--[a-z][\w-]*)(\S*)")


def help_text(nobubble, args):
    r = subprocess.run([nobubble, *args], capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise RuntimeError(f"'{' '.join([nobubble, *args])}' exited {r.returncode}: {r.stderr.strip()}")
    return r.stdout


def parse_options(lines):
    """The flags of option lines ('  -h,--help  ...', '    --steps,--train-iters INT=1 ...')."""
    flags = set()
    for line in lines:
        m = OPTION_LINE.match(line)
        if m:
            first = line.split()[0]
            flags.update(FLAG.findall(first))
            if m.group(1):
                flags.add(m.group(1).rstrip(","))
    return flags


def program_flags(nobubble):
    """{subcommand path ('' = the program itself, 'train', 'bench ops'): its flags} from --help-all."""
    text = help_text(nobubble, ["--help-all"])
    subs = {}
    current = ""
    block = None  # "options" or "subcommands", for the current subcommand
    subs[""] = set()
    nested = []
    in_subcommands = False  # past the program's own "Subcommands:" line
    for line in text.split("\n"):
        if not line.strip():
            continue
        if re.match(r"^\S", line):
            if line.rstrip(":") in ("Options", "Subcommands"):
                block = line.rstrip(":").lower()
                in_subcommands = in_subcommands or block == "subcommands"
                continue
            if in_subcommands and re.match(r"^[a-z][\w-]*$", line):
                current = line.strip()
                subs[current] = set()
                block = "sub-body"
                continue
            continue
        stripped = line.strip()
        if stripped in ("Options:", "Subcommands:"):
            block = "sub-" + stripped.rstrip(":").lower()
            continue
        if block in ("options", "sub-options"):
            subs[current] |= parse_options([line])
        elif block == "sub-subcommands":
            m = re.match(r"^\s+([a-z][\w-]*)\s{2,}", line)
            if m:
                nested.append((current, m.group(1)))
    for parent, child in nested:
        path = f"{parent} {child}"
        subs[path] = parse_options(help_text(nobubble, [*parent.split(), child, "--help"]).split("\n"))
    return subs


def main():
    if len(sys.argv) < 2:
        print("usage: test_cli_docs.py NOBUBBLE [REPO_ROOT]")
        sys.exit(2)
    nobubble = os.path.abspath(sys.argv[1])
    root = os.path.abspath(sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(__file__), "..", ".."))
    rep = doclib.Report()
    try:
        subs = program_flags(nobubble)
    except (OSError, RuntimeError, subprocess.TimeoutExpired) as e:
        rep.fail(f"cannot read the program's help: {e}")
        rep.finish()
    if "train" not in subs or len(subs["train"]) < 10:
        rep.fail(f"parsed no flags of 'train' from '{nobubble} --help-all': did its format change?")
        rep.finish()
    all_flags = set().union(*subs.values())
    owner_of = {}  # flag -> one subcommand that has it (for messages)
    for s in sorted(subs, reverse=True):
        for fl in subs[s]:
            owner_of[fl] = s
    path = os.path.join(root, CLI_MD)
    if not os.path.isfile(path):
        rep.fail(f"{CLI_MD} is missing")
        rep.finish()
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    lines = text.split("\n")

    # Which subcommand owns each line: the nearest heading naming one in backticks; a heading naming none
    # ends the section of any subcommand above it at the same or a higher level.
    owner = [None] * (len(lines) + 1)
    heading_at = {no: (lvl, h) for no, lvl, h in doclib.headings(text)}
    sections = {}
    stack = []  # (level, subcommand or None)
    for no in range(1, len(lines) + 1):
        if no in heading_at:
            lvl, h = heading_at[no]
            stack = [(l, s) for l, s in stack if l < lvl]
            named = None
            for span in re.findall(r"`([^`]+)`", h):
                span = re.sub(r"^nobubble\s+", "", span.strip())
                if span in subs and span:
                    named = span
                    break
            if named is None and re.search(r"top-level", h, re.I):
                named = ""
            if named is not None:
                sections.setdefault(named, no)
            stack.append((lvl, named))
        inherited = [s for _, s in stack if s is not None]
        owner[no] = inherited[-1] if inherited else None

    # 1. Every flag of the program is documented.
    documented = set()
    for no, line in doclib.lines_outside_code(text):
        for span in re.findall(r"`([^`]+)`", line):
            documented.update(FLAG.findall(span))
            documented.update(re.findall(r"(?<![\w-])-h\b", span))
    missing = 0
    for s in sorted(subs):
        for fl in sorted(subs[s]):
            if fl not in documented:
                missing += 1
                where = f"nobubble {s} --help".replace("  ", " ") if s else "nobubble --help-all"
                rep.fail(f"{CLI_MD} does not document {fl} (listed by '{where}')")
    if missing == 0:
        rep.ok(f"{CLI_MD} documents all {len(all_flags)} flags of {len(subs) - 1} subcommands and the program")

    # 2. Every flag in a table row is the section's subcommand's.
    wrong = 0
    rows = 0
    for no, line in doclib.lines_outside_code(text):
        if not line.lstrip().startswith("|"):
            continue
        for span in re.findall(r"`([^`]+)`", line):
            for fl in FLAG.findall(span):
                rows += 1
                s = owner[no]
                allowed = subs[s] if s is not None else all_flags
                if fl not in allowed:
                    wrong += 1
                    who = f"'nobubble {s}'" if s else ("the program itself" if s == "" else "any subcommand")
                    rep.fail(f"{CLI_MD}:{no}: {fl} is not a flag of {who} (its --help)")
    if wrong == 0:
        rep.ok(f"the {rows} flags in {CLI_MD}'s tables are each a flag of its section's subcommand")

    # 3. Every subcommand has a section.
    nosec = 0
    for s in sorted(subs):
        if s and s not in sections:
            nosec += 1
            rep.fail(f"{CLI_MD} has no section for the subcommand '{s}' (a heading with `{s}`)")
    if nosec == 0:
        rep.ok(f"{CLI_MD} has a section for each of the {len(subs) - 1} subcommands")

    # 4. Commands in code blocks use real flags.
    how, files = doclib.repo_files(root)
    checked = 0
    badcmd = 0
    names = sorted((s for s in subs if s), key=len, reverse=True)
    for f in (f for f in files if f.endswith(".md")):
        with open(os.path.join(root, f), encoding="utf-8") as fh:
            md = fh.read()
        joined = []  # code lines with their backslash continuations joined
        for no, line in doclib.code_block_lines(md):
            if joined and joined[-1][1].endswith("\\"):
                joined[-1] = (joined[-1][0], joined[-1][1][:-1] + " " + line)
            else:
                joined.append((no, line))
        for no, line in joined:
            uses = []
            for m in re.finditer(r"TRAIN_ARGS=\"([^\"]*)\"", line):
                uses.append(("train", m.group(1)))
            line_wo = re.sub(r"TRAIN_ARGS=\"[^\"]*\"", "", line)
            m = re.search(r"(?:^|[\s/$}])nobubble\s+(.*)", line_wo)
            if m:
                rest = m.group(1).split("#")[0]
                rest = re.split(r"\s(?:\||&&|;|>)\s", rest)[0]
                for s in names:
                    if re.match(re.escape(s) + r"(\s|$)", rest):
                        uses.append((s, rest[len(s):]))
                        break
            for s, args in uses:
                checked += 1
                for fl in FLAG.findall(args):
                    if fl not in subs[s]:
                        badcmd += 1
                        rep.fail(f"{f}:{no}: the command 'nobubble {s}' has no flag {fl}")
    rep.tally(checked, badcmd, "found no 'nobubble SUB' command in any .md code block: is the pattern broken?",
              f"{checked} nobubble commands in the .md files' code blocks ({how}) use only real flags")
    rep.finish()


if __name__ == "__main__":
    main()

"""Shared helpers of the docs tests (tests/docs/test_*.py): the repository's files, markdown outside code, headings.

The file list is `git ls-files` when ROOT is the top of a git checkout, else every file under ROOT but .git,
.deps and build folders (a clean clone has no build folder; a tarball has no .git)."""
import os
import re
import subprocess
import sys


def repo_files(root):
    try:
        top = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=root, capture_output=True, text=True)
        if top.returncode == 0 and os.path.realpath(top.stdout.strip()) == os.path.realpath(root):
            out = subprocess.run(["git", "ls-files"], cwd=root, capture_output=True, text=True, check=True)
            return "git ls-files", sorted(f for f in out.stdout.splitlines() if os.path.isfile(os.path.join(root, f)))
    except OSError:
        pass
    files = []
    for d, dirs, names in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x not in (".git", ".deps") and not x.startswith("build"))
        files += [os.path.relpath(os.path.join(d, n), root) for n in names]
    return "find", sorted(files)


FENCE = re.compile(r"^\s*(```|~~~)")


def _lines(text, in_code):
    inside = False
    for no, line in enumerate(text.split("\n"), 1):
        if FENCE.match(line):
            inside = not inside
        elif inside == in_code:
            yield no, line


def lines_outside_code(text):
    """(line number, line) for every line outside fenced code blocks."""
    return _lines(text, False)


def code_block_lines(text):
    """(line number, line) for every line inside fenced code blocks."""
    return _lines(text, True)


HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def headings(text):
    """(line number, level, text) of every ATX heading outside code blocks."""
    for no, line in lines_outside_code(text):
        m = HEADING.match(line)
        if m:
            yield no, len(m.group(1)), m.group(2)


def github_slug(heading):
    """GitHub's anchor for a heading: markup dropped, lower case, punctuation but '-' and '_' removed, spaces to '-'."""
    s = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # [text](url) -> text
    s = s.replace("`", "").strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def anchors(text):
    """Every anchor GitHub makes for a file's headings (repeats get -1, -2, ...)."""
    seen = {}
    out = set()
    for _, _, h in headings(text):
        slug = github_slug(h)
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


class Report:
    def __init__(self):
        self.passed = 0
        self.failed = 0

    def ok(self, msg):
        self.passed += 1
        print(f"ok: {msg}")

    def fail(self, msg):
        self.failed += 1
        print(f"FAIL: {msg}")

    def tally(self, found, bad, none_msg, ok_msg):
        """A check's summary: a failure when it found nothing to check (its pattern is broken), else ok if no bad."""
        if found == 0:
            self.fail(none_msg)
        elif bad == 0:
            self.ok(ok_msg)

    def finish(self):
        print(f"{self.passed} passed, {self.failed} failed")
        sys.exit(0 if self.failed == 0 else 1)

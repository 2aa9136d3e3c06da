#!/usr/bin/env python3
"""Every relative link in every tracked .md file resolves.

A markdown link or image `[text](target)` / `![alt](target)` outside code: http(s):, mailto: and other URL schemes
are skipped; any other target must be a file or folder inside the repository, relative to the linking file. A
`#anchor` (alone, or after a .md target) must be the GitHub anchor of a heading of that file (lower case,
punctuation dropped, spaces to '-'). Links in fenced code blocks and in `inline code` are not links and are
left alone. Usage: test_doc_links.py [REPO_ROOT]"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import doclib  # noqa: E402

LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def link_problem(root, f, target, anchors_of):
    """What is wrong with the link `target` of file f, or None."""
    path, _, anchor = target.partition("#")
    resolved = f
    if path:
        resolved = os.path.normpath(os.path.join(os.path.dirname(f), path))
        if resolved == ".." or resolved.startswith("../") or os.path.isabs(path):
            return "points outside the repository"
        if not os.path.exists(os.path.join(root, resolved)):
            return f"no such file {resolved}"
    if anchor and resolved.endswith(".md") and os.path.isfile(os.path.join(root, resolved)):
        if anchor not in anchors_of(resolved):
            return f"{resolved} has no heading with the anchor #{anchor}"
    return None


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", ".."))
    rep = doclib.Report()
    how, files = doclib.repo_files(root)
    md = [f for f in files if f.endswith(".md")]
    if len(md) < 3:
        rep.fail(f"only {len(md)} .md files found by {how} under {root}")
        rep.finish()
    anchor_cache = {}

    def anchors_of(path):
        if path not in anchor_cache:
            with open(os.path.join(root, path), encoding="utf-8") as fh:
                anchor_cache[path] = doclib.anchors(fh.read())
        return anchor_cache[path]

    links = []  # (where, target)
    for f in md:
        with open(os.path.join(root, f), encoding="utf-8") as fh:
            text = fh.read()
        for no, line in doclib.lines_outside_code(text):
            line = re.sub(r"`[^`]*`", "``", line)  # inline code holds no links
            links += [(f, no, m.group(1)) for m in LINK.finditer(line) if m.group(1) and not SCHEME.match(m.group(1))]
    problems = [(f, no, t, link_problem(root, f, t, anchors_of)) for f, no, t in links]
    problems = [p for p in problems if p[3]]
    for f, no, target, problem in problems:
        rep.fail(f"{f}:{no}: link '{target}': {problem}")
    rep.tally(len(links), len(problems), "found no relative link in any .md file: is the pattern broken?",
              f"{len(links)} relative links in {len(md)} .md files ({how}) resolve, anchors included")
    rep.finish()


if __name__ == "__main__":
    main()

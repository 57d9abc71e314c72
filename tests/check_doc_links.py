#!/usr/bin/env python3
"""Checks the relative links of the project's Markdown pages.

Every link in README.md, docs/*.md, BENCHMARKS.md and each folder's README.md that is not a
URL (http:, https:, mailto:) must name a file or folder of the tree, and its #anchor, if any,
must be a heading of that page as GitHub makes anchors of headings: lower case, everything but
letters, digits, spaces, '-' and '_' dropped, spaces made '-', and '-1', '-2', ... after a
repeated heading. Links inside code (fenced blocks, `spans`) are not links and are passed over.

Usage: check_doc_links.py [ROOT]   (ROOT: the checkout, default the folder above this file's)
Prints one line per broken link (FILE:LINE: TARGET: why) and exits 1 if there is any, else
prints how many links it checked and exits 0.
"""

import os
import re
import sys

LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^()\s]*(?:\([^()\s]*\)[^()\s]*)*)(?:\s+\"[^\"]*\")?\)")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def pages(root):
    names = ["README.md", "BENCHMARKS.md"]
    docs = os.path.join(root, "docs")
    if os.path.isdir(docs):
        names += sorted("docs/" + n for n in os.listdir(docs) if n.endswith(".md"))
    for entry in sorted(os.listdir(root)):
        if entry.startswith(".") or entry.startswith("bazel-") or entry == "docs":
            continue
        if os.path.isfile(os.path.join(root, entry, "README.md")):
            names.append(entry + "/README.md")
    return [n for n in names if os.path.isfile(os.path.join(root, n))]


def slug(heading):
    text = CODE_SPAN.sub(lambda m: m.group(0).strip("`"), heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link in a heading: its text
    text = text.strip().lower()
    text = "".join(c for c in text if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


def lines_outside_fences(text):
    fence = None
    for number, line in enumerate(text.split("\n"), 1):
        match = FENCE.match(line)
        if match:
            if fence is None:
                fence = match.group(1)
            elif match.group(1) == fence:
                fence = None
            continue
        if fence is None:
            yield number, line


def anchors(path, cache={}):
    if path not in cache:
        seen = {}
        found = set()
        with open(path, encoding="utf-8") as f:
            for _, line in lines_outside_fences(f.read()):
                match = HEADING.match(line)
                if not match:
                    continue
                base = slug(match.group(2))
                count = seen.get(base, 0)
                seen[base] = count + 1
                found.add(base if count == 0 else "%s-%d" % (base, count))
        cache[path] = found
    return cache[path]


def check(root):
    broken = []
    checked = 0
    for page in pages(root):
        folder = os.path.dirname(os.path.join(root, page))
        with open(os.path.join(root, page), encoding="utf-8") as f:
            text = f.read()
        for number, line in lines_outside_fences(text):
            for match in LINK.finditer(CODE_SPAN.sub("", line)):
                target = match.group(1)
                if not target or re.match(r"^[a-z][a-z0-9+.-]*:", target):
                    continue
                checked += 1
                path, _, anchor = target.partition("#")
                full = os.path.normpath(os.path.join(folder, path)) if path else os.path.join(root, page)
                where = "%s:%d: %s" % (page, number, target)
                if not os.path.realpath(full).startswith(os.path.realpath(root) + os.sep):
                    broken.append(where + ": outside the tree")
                elif not os.path.exists(full):
                    broken.append(where + ": no such file")
                elif anchor and not full.endswith(".md"):
                    broken.append(where + ": an anchor into a file that is not Markdown")
                elif anchor and anchor not in anchors(full):
                    broken.append(where + ": no heading with that anchor")
    return broken, checked


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    broken, checked = check(root)
    for line in broken:
        print(line)
    if broken:
        print("%d of %d relative links broken" % (len(broken), checked))
        return 1
    print("%d relative links, all resolve" % checked)
    return 0


if __name__ == "__main__":
    sys.exit(main())

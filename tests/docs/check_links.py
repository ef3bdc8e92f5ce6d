#!/usr/bin/env python3
"""Fails on a broken relative link in README.md or docs/*.md (CTest docs_links).

  python3 tests/docs/check_links.py ROOT

For every markdown link [text](target) outside code (fenced blocks and `inline code`) whose
target is not a URL: the file must exist, relative to the page, inside ROOT; a `#fragment` on a
markdown page must name one of its headings (GitHub's anchors: lower case, punctuation dropped,
spaces to hyphens). Every docs/ page must also open with what it is for: a `# Title` line, a
blank line, then a line of prose (not a heading, a table, a list or code). Prints one line per
problem (page:line: what) and exits 1, else prints how many links it checked and exits 0.
"""

import os
import re
import sys

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
INLINE_CODE = re.compile(r"`[^`]*`")


def prose_lines(text):
    """(line number, line) of the lines outside fenced code blocks, inline code removed."""
    fenced = False
    for n, line in enumerate(text.split("\n"), start=1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            yield n, INLINE_CODE.sub("", line)


def anchors(path):
    """The heading anchors of a markdown file, as GitHub makes them."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    found = set()
    fenced = False
    for line in text.split("\n"):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        m = re.match(r"#{1,6}\s+(.*)", line)
        if fenced or not m:
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
        base, k = slug, 1
        while slug in found:  # repeated headings get -1, -2, ...
            slug, k = f"{base}-{k}", k + 1
        found.add(slug)
    return found


def check_page(root, page):
    """The broken links of one page, as messages; and how many links it has."""
    with open(page, encoding="utf-8") as f:
        text = f.read()
    problems, count = [], 0
    rel_page = os.path.relpath(page, root)
    for n, line in prose_lines(text):
        for target in LINK.findall(line):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, ...
                continue
            count += 1
            path, _, fragment = target.partition("#")
            resolved = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
            where = f"{rel_page}:{n}: {target}"
            if os.path.relpath(resolved, root).startswith(".."):
                problems.append(f"{where}: points outside the repository")
            elif not os.path.exists(resolved):
                problems.append(f"{where}: no such file")
            elif fragment and resolved.endswith(".md") and fragment not in anchors(resolved):
                problems.append(f"{where}: no heading with anchor #{fragment}")
    return problems, count


def opening_problem(root, page):
    """Why a docs/ page does not open with a title and a line on what it is for, or None."""
    with open(page, encoding="utf-8") as f:
        head = f.read().split("\n")[:3]
    rel_page = os.path.relpath(page, root)
    if len(head) < 3 or not head[0].startswith("# "):
        return f"{rel_page}:1: does not start with a '# Title' line"
    first = head[2].lstrip()
    if head[1].strip() or not first or first.startswith(("#", "|", "- ", "* ", "```")):
        return f"{rel_page}:3: the title is not followed by a line on what the page is for"
    return None


def main(argv):
    if len(argv) != 1:
        print("usage: check_links.py ROOT", file=sys.stderr)
        return 2
    root = os.path.abspath(argv[0])
    docs = os.path.join(root, "docs")
    pages = [os.path.join(root, "README.md")]
    if os.path.isdir(docs):
        pages += sorted(os.path.join(docs, p) for p in os.listdir(docs) if p.endswith(".md"))
    problems, count = [], 0
    for page in pages:
        if not os.path.isfile(page):
            problems.append(f"{os.path.relpath(page, root)}: missing")
            continue
        p, c = check_page(root, page)
        problems += p
        count += c
        if page != pages[0] and opening_problem(root, page):
            problems.append(opening_problem(root, page))
    for p in problems:
        print(p)
    if problems:
        print(f"docs_links: {len(problems)} problem(s) in {len(pages)} page(s)")
        return 1
    print(f"docs_links: {count} relative links in {len(pages)} pages, all resolve")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

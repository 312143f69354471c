#!/usr/bin/env python3
"""Checks that the relative links of the front pages and the docs lead somewhere.

Usage: check_links.py SOURCE_ROOT
Reads README.md, CHANGELOG.md and docs/*.md. Every relative link in them (`[text](path)`,
`![alt](path)`, a reference definition `[id]: path`, an HTML `href="..."` or `src="..."`) must
name a file or folder that exists, relative to the page (a path starting with `/` is relative to
SOURCE_ROOT, as on GitHub). Where the link has an anchor (`page.md#section`, or `#section` for the
page itself) and leads to a markdown page, that page must have a heading whose GitHub slug is the
anchor (or an HTML `id=` / `name=` with it).

The slug is GitHub's: the heading's text as it is shown (code spans keep their text, emphasis and
link markup go), lowercased, every character other than a letter, a digit, a space, '-' or '_'
removed, and each space turned into '-'. A page's second heading with the same slug gets '-1', its
third '-2', and so on.

Links to http(s) and mailto addresses are not followed, and nothing inside a fenced code block
or an inline code span is read as a link.

Prints `FILE:LINE: link -> why` for each broken link, then how many links it checked, and exits
1 if any is broken.

check_links.py --self-test writes a small tree with good and bad links and fails unless exactly
the bad ones are reported, each at its line.
"""
import difflib
import os
import re
import sys
import urllib.parse

fence_re = re.compile(r"^\s*(`{3,}|~{3,})")
atx_re = re.compile(r"^\s{0,3}(#{1,6})(?:\s+(.*?))?\s*$")
setext_re = re.compile(r"^\s{0,3}(=+|-+)\s*$")
# `](target)` or `](target "title")`: the text before it may have wrapped onto earlier lines.
inline_link_re = re.compile(r"\]\(\s*(<[^>\n]*>|[^\s()]*(?:\([^\s()]*\)[^\s()]*)*)(?:\s+(?:\"[^\"\n]*\"|'[^'\n]*'))?\s*\)")
reference_re = re.compile(r"^ {0,3}\[[^\]\n]+\]:[ \t]*(<[^>\n]*>|\S+)")
html_re = re.compile(r"""\b(?:href|src)\s*=\s*["']([^"'\n]*)["']""")
html_anchor_re = re.compile(r"""\b(?:id|name)\s*=\s*["']([^"'\n]*)["']""")
external_re = re.compile(r"^(?:[a-zA-Z][a-zA-Z0-9+.-]*:|//)")  # http:, https:, mailto:, ftp:, //host


def pages(source_root):
    """README.md, CHANGELOG.md and docs/*.md, those that exist, as paths relative to the root."""
    found = [n for n in ("README.md", "CHANGELOG.md") if os.path.isfile(os.path.join(source_root, n))]
    docs = os.path.join(source_root, "docs")
    if os.path.isdir(docs):
        found += ["docs/" + n for n in sorted(os.listdir(docs)) if n.endswith(".md")]
    return found


def blank_fences(text):
    """The text with fenced code blocks blanked out (inline code is kept: headings show it)."""
    out = []
    fence = None
    for line in text.split("\n"):
        m = fence_re.match(line)
        if fence is None and m:
            fence = (m.group(1)[0], len(m.group(1)))
            out.append("")
        elif fence is not None:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= fence[1] and line.strip() == m.group(1):
                fence = None
            out.append("")
        else:
            out.append(line)
    return "\n".join(out)


def prose(text):
    """The text with fenced code blocks and inline code spans blanked out (newlines kept, so that
    an offset still gives the line)."""
    # Code spans: a run of backticks closes at the next run of the same length in the same
    # paragraph (they may wrap); an unmatched run is literal text.
    paragraphs = re.split(r"(\n[ \t]*\n)", blank_fences(text))
    for k in range(0, len(paragraphs), 2):
        paragraphs[k] = blank_code_spans(paragraphs[k])
    return "".join(paragraphs)


def blank_code_spans(text):
    runs = [(m.start(), m.end()) for m in re.finditer(r"`+", text)]
    chars = list(text)
    i = 0
    while i < len(runs):
        start, end = runs[i]
        width = end - start
        close = next((j for j in range(i + 1, len(runs)) if runs[j][1] - runs[j][0] == width), None)
        if close is None:
            i += 1
            continue
        for p in range(start, runs[close][1]):
            if chars[p] != "\n":
                chars[p] = " "
        i = close + 1
    return "".join(chars)


def heading_text(raw):
    """A heading's markdown as GitHub shows it: code spans keep their text, the rest loses its
    link, image, emphasis and HTML markup."""
    parts = re.split(r"(`+)(.*?)\1", raw)
    shown = []
    for k in range(0, len(parts), 3):
        plain = parts[k]
        plain = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", plain)  # links and images: their text
        plain = re.sub(r"<[^>]+>", "", plain)                      # HTML tags
        plain = plain.replace("*", "")
        plain = re.sub(r"(?<![A-Za-z0-9])_+|_+(?![A-Za-z0-9])", "", plain)  # _emphasis_, not snake_case
        shown.append(plain)
        if k + 2 < len(parts):
            shown.append(parts[k + 2])
    return "".join(shown).strip()


def slug(text):
    """GitHub's anchor for a heading whose shown text is `text` (before the duplicate suffix)."""
    text = text.lower()
    text = "".join(c for c in text if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


def anchors(text):
    """Every anchor a page offers: its headings' slugs (duplicates numbered) and HTML ids."""
    found = set()
    seen = {}
    previous = ""
    for line in blank_fences(text).split("\n"):
        raw = None
        m = atx_re.match(line)
        if m:
            raw = re.sub(r"(?:^|\s+)#+$", "", m.group(2) or "")  # the optional closing #s
        elif setext_re.match(line) and previous.strip() and not atx_re.match(previous) and \
                not re.match(r"^\s*([-*+>|]|\d+[.)])", previous):
            raw = previous.strip()
        if raw is not None:
            base = slug(heading_text(raw))
            n = seen.get(base, 0)
            found.add(base if n == 0 else f"{base}-{n}")
            seen[base] = n + 1
        previous = line
    found.update(html_anchor_re.findall(blank_fences(text)))
    return found


def links(text):
    """(line, target) for each link of a page, in order."""
    shown = prose(text)
    found = []
    for regex in (inline_link_re, html_re):
        for m in regex.finditer(shown):
            found.append((shown.count("\n", 0, m.start(1)) + 1, m.group(1)))
    # A reference definition `[id]: target` starts a block: it cannot continue a paragraph.
    lines = shown.split("\n")
    for number, line in enumerate(lines, 1):
        m = reference_re.match(line)
        previous = lines[number - 2] if number > 1 else ""
        if m and (previous.strip() == "" or reference_re.match(previous)):
            found.append((number, m.group(1)))
    return sorted((line, t[1:-1] if t.startswith("<") and t.endswith(">") else t) for line, t in found)


def check_link(source_root, page, target, anchor_cache):
    """Why the link `target` on `page` is broken, or None when it is fine or not ours to follow."""
    if target == "":
        return "empty link"
    if external_re.match(target):
        return None
    path, _, anchor = target.partition("#")
    path = urllib.parse.unquote(path.split("?")[0])
    anchor = urllib.parse.unquote(anchor)
    if path == "":
        dest = os.path.join(source_root, page)
    elif path.startswith("/"):
        dest = os.path.join(source_root, path.lstrip("/"))
    else:
        dest = os.path.join(source_root, os.path.dirname(page), path)
    dest = os.path.normpath(dest)
    rel = os.path.relpath(dest, source_root)
    if rel.startswith(".."):
        return f"leads outside the repository ({rel})"
    if not os.path.exists(dest):
        return f"{rel} does not exist"
    if not anchor or not dest.endswith(".md") or not os.path.isfile(dest):
        return None
    if dest not in anchor_cache:
        with open(dest, encoding="utf-8") as f:
            anchor_cache[dest] = anchors(f.read())
    offered = anchor_cache[dest]
    if anchor in offered:
        return None
    close = difflib.get_close_matches(anchor, sorted(offered), n=1, cutoff=0.6)
    hint = f" (closest: #{close[0]})" if close else ""
    return f"{rel} has no heading with the slug '{anchor}'{hint}"


def check(source_root):
    """(problems, links checked): each problem as `FILE:LINE: link -> why`."""
    problems = []
    checked = 0
    anchor_cache = {}
    for page in pages(source_root):
        with open(os.path.join(source_root, page), encoding="utf-8") as f:
            text = f.read()
        for line, target in links(text):
            if external_re.match(target):
                continue
            checked += 1
            why = check_link(source_root, page, target, anchor_cache)
            if why:
                problems.append(f"{page}:{line}: {target} -> {why}")
    return problems, checked


def self_test():
    """Good and bad links in a small tree: exactly the bad ones are reported, at their lines."""
    import tempfile
    failures = []

    from scratch_tree import write  # the same tree writer as the other checkers' self-tests

    for shown, expected in [("Build time", "build-time"),
                            ("Compile time of the headers (issue 13)", "compile-time-of-the-headers-issue-13"),
                            ("`SimResult::bubble_fraction` and *more*", "simresultbubble_fraction-and-more"),
                            ("What sits outside the flow?", "what-sits-outside-the-flow"),
                            ("F&B pairs: [DualPipeV](x.md)", "fb-pairs-dualpipev"),
                            ("Two  spaces — a dash", "two--spaces--a-dash")]:
        got = slug(heading_text(shown))
        if got != expected:
            failures.append(f"slug of '{shown}' is '{got}', expected '{expected}'")

    with tempfile.TemporaryDirectory() as root:
        write(root, "examples/demo.cpp", "int main() {}\n")
        write(root, "docs/img/pic.svg", "<svg/>\n")
        write(root, "docs/b.md", "# Page B\n\n## Setup\n\ntext\n\n## Setup\n\n## `run_step()` and *friends*\n\n"
              "```sh\n# not a heading\n```\n\n<a id=\"custom-spot\"></a>\n\nSetext heading\n--------------\n")
        write(root, "README.md", "\n".join([
            "# Project",                                                   # 1
            "",                                                            # 2
            "See [b](docs/b.md) and [setup](docs/b.md#setup).",            # 3 good, good
            "The [second setup](docs/b.md#setup-1), [third](docs/b.md#setup-2).",  # 4 good, bad
            "![pic](docs/img/pic.svg) [code](examples/demo.cpp) [folder](examples/)",  # 5 good x3
            "A [missing page](docs/nope.md) and [web](https://example.com/x.md).",  # 6 bad, skipped
            "Mail [us](mailto:a@b.c). Up [here](#project), not [there](#nowhere).",  # 7 skipped, good, bad
            "`[in code](docs/gone.md)` and ``[double `tick`](gone.md)``",  # 8 skipped (inline code)
            "```md",                                                       # 9
            "[in a fence](docs/gone.md)",                                  # 10 skipped
            "```",                                                         # 11
            "[run](docs/b.md#run_step-and-friends) [spot](docs/b.md#custom-spot) "
            "[setext](docs/b.md#setext-heading)",                          # 12 good x3
            "[titled](docs/b.md \"B\") [wrapped",                          # 13 good
            "text](docs/missing.md) [code heading](docs/b.md#not-a-heading)",  # 14 bad, bad (in a fence)
            "",                                                            # 15
            "[ref]: docs/b.md#not-here",                                   # 16 bad
            "[good ref]: <docs/b.md#page-b>",                              # 17 good
            "A paragraph that ends in a bracket",                          # 18
            "[range]: not-a-definition.md",                                # 19 skipped (continues it)
            "[range]:",                                                    # 20 skipped
            "",                                                            # 21
            "| a | b |",                                                   # 22
            "",
        ]))
        write(root, "CHANGELOG.md", "# Changes\n\n## 0.1.0\n\nSee [0.1.0](#010) and [the readme](README.md#project).\n"
              "Broken: [x](README.md#projects).\n")
        write(root, "docs/a.md", "# A\n\n[up](../README.md), [b](b.md#page-b), [out](../../x.md)\n"
              "[c](c.md)\n\n~~~\n[fenced](c.md)\n~~~\n")
        write(root, "docs/notes.txt", "[not a page](nowhere.md)\n")
        problems, checked = check(root)
        expected = ["README.md:4: docs/b.md#setup-2 ->", "README.md:6: docs/nope.md ->",
                    "README.md:7: #nowhere ->", "README.md:14: docs/missing.md ->",
                    "README.md:14: docs/b.md#not-a-heading ->", "README.md:16: docs/b.md#not-here ->",
                    "CHANGELOG.md:6: README.md#projects ->", "docs/a.md:3: ../../x.md ->",
                    "docs/a.md:4: c.md ->"]
        for e in expected:
            if not any(p.startswith(e) for p in problems):
                failures.append(f"not caught: {e}")
        for p in problems:
            if not any(p.startswith(e) for e in expected):
                failures.append(f"reported but fine: {p}")
        if not any("closest: #project" in p for p in problems):
            failures.append(f"no hint at the closest heading: {problems}")
        if checked != 25:
            failures.append(f"expected 25 links checked, counted {checked}")
        write(root, "docs/clean/x.md", "")  # a clean tree passes
        clean = os.path.join(root, "clean")
        write(clean, "README.md", "# Hi\n\n[docs](docs/index.md#the-pages)\n")
        write(clean, "docs/index.md", "# The pages\n\n[home](../README.md#hi)\n")
        if check(clean) != ([], 2):
            failures.append(f"a clean tree reported {check(clean)}")
    for f in failures:
        print("self-test:", f)
    print("self-test:", "failed" if failures else "passed")
    return 1 if failures else 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    if len(sys.argv) != 2:
        print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
        return 2
    source_root = os.path.abspath(sys.argv[1])
    problems, checked = check(source_root)
    for p in problems:
        print(p)
    print(f"{checked} relative links checked in README.md, CHANGELOG.md and docs/*.md, {len(problems)} broken")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

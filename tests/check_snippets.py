#!/usr/bin/env python3
"""Checks that code shown in the docs is the code that compiles in CI.

A markdown line `<!-- snippet: PATH -->` followed by a fenced code block must show exactly
the lines of PATH between `// readme-begin` and `// readme-end`.
Usage: check_snippets.py SOURCE_ROOT DOC.md [DOC.md ...]
"""
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1])
failures = 0
checked = 0
for doc in sys.argv[2:]:
    lines = (root / doc).read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"<!-- snippet: (\S+) -->", line.strip())
        if not m:
            continue
        source = (root / m.group(1)).read_text(encoding="utf-8").splitlines()
        try:
            begin = next(k for k, l in enumerate(source) if l.strip() == "// readme-begin")
            end = next(k for k, l in enumerate(source) if l.strip() == "// readme-end")
        except StopIteration:
            print(f"{doc}:{i + 1}: {m.group(1)} has no // readme-begin ... // readme-end region")
            failures += 1
            continue
        expected = source[begin + 1:end]
        if i + 1 >= len(lines) or not lines[i + 1].startswith("```"):
            print(f"{doc}:{i + 1}: the snippet marker must be followed by a fenced code block")
            failures += 1
            continue
        close = next((k for k in range(i + 2, len(lines)) if lines[k].startswith("```")), None)
        shown = lines[i + 2:close]
        checked += 1
        if shown != expected:
            for k, (a, b) in enumerate(zip(shown, expected)):
                if a != b:
                    print(f"{doc}:{i + 3 + k}: differs from {m.group(1)}:{begin + 2 + k}\n  doc:  {a}\n  file: {b}")
                    break
            else:
                print(f"{doc}:{i + 1}: shows {len(shown)} lines, {m.group(1)} has {len(expected)}")
            failures += 1
if checked == 0:
    print("no snippets found")
    sys.exit(1)
print(f"{checked} snippet(s) checked, {failures} differ")
sys.exit(1 if failures else 0)

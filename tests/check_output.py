#!/usr/bin/env python3
"""Runs a program and checks that its standard output is the text block a page shows for it.

A markdown line `<!-- output: NAME -->` followed by a fenced code block must hold exactly what
the program prints (NAME names it for the reader; the program is the one given here), so that
the output shown beside code in the README cannot go stale when the library's results change.
Usage: check_output.py DOC.md NAME PROGRAM [ARGS...]
"""
import re
import subprocess
import sys

doc, name, program = sys.argv[1], sys.argv[2], sys.argv[3:]
lines = open(doc, encoding="utf-8").read().splitlines()
marker = next((i for i, l in enumerate(lines) if re.fullmatch(rf"<!-- output: {re.escape(name)} -->", l.strip())), None)
if marker is None or marker + 1 >= len(lines) or not lines[marker + 1].startswith("```"):
    sys.exit(f"{doc}: no '<!-- output: {name} -->' marker followed by a fenced block")
close = next((k for k in range(marker + 2, len(lines)) if lines[k].startswith("```")), None)
if close is None:
    sys.exit(f"{doc}:{marker + 2}: the block after the output marker is not closed")
shown = lines[marker + 2:close]
run = subprocess.run(program, capture_output=True, text=True, timeout=120)
if run.returncode != 0:
    sys.exit(f"{program[0]} exited {run.returncode}:\n{run.stderr}")
printed = run.stdout.splitlines()
if printed != shown:
    print(f"{doc}:{marker + 3}: the output shown for {name} differs from what {program[0]} prints")
    for k in range(max(len(shown), len(printed))):
        a = shown[k] if k < len(shown) else "<none>"
        b = printed[k] if k < len(printed) else "<none>"
        if a != b:
            print(f"  line {k + 1}\n    page:    {a}\n    program: {b}")
    sys.exit(1)
print(f"{doc}: the {len(shown)} lines shown for {name} are what it prints")

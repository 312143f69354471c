#!/usr/bin/env python3
"""Checks that the library's folders form the one-way flow docs/architecture.md describes: a
header may include headers of its own folder and of folders earlier in LAYERS, never of a
later one. A newcomer can then read the folders in this order without jumping back.

Usage: check_layers.py SOURCE_ROOT
Prints each include that goes against the flow and exits 1 if there is any; also fails when a
folder exists that LAYERS does not place, and when a header opens namespace ppsched without the
mode's tag (`namespace ppsched::inline PPSCHED_MODE`, include/ppsched/config.hpp): an untagged
name would be shared by header-only and compiled-mode files again.
"""
import os
import re
import sys

# The reading order (docs/architecture.md). The top-level headers (error.hpp, config.hpp, the
# umbrellas) are handled apart: error.hpp and config.hpp come first, the umbrellas last.
LAYERS = [
    "graph",
    "partition",
    "schedule",
    "costs",
    "engine",
    "lower",
    "validate",
    "trace",
    "sim",
    "plan",
    "runtime",
    "backend/cpu",
    "backend/mpi",
    "backend/cuda",
    "adapters",  # opt-in bridges to frameworks (libtorch): never included by the umbrella
]
FIRST = {"error.hpp", "config.hpp"}  # includable from everywhere

root = os.path.join(os.path.abspath(sys.argv[1]), "include", "ppsched")
include_re = re.compile(r'^\s*#\s*include\s*[<"]ppsched/([^">]+)[">]', re.M)
untagged_re = re.compile(r'^\s*namespace\s+ppsched\b(?!::inline PPSCHED_MODE\b)', re.M)


def folder_of(rel):
    if rel.startswith("backend/") and rel.count("/") >= 2:
        return "/".join(rel.split("/")[:2])
    if rel in ("backend/cpu.hpp", "backend/mpi.hpp", "backend/cuda.hpp"):  # each backend's umbrella
        return rel[: -len(".hpp")]
    return rel.split("/")[0] if "/" in rel else None  # None: a top-level header


problems = []
for dirpath, _, names in os.walk(root):
    for name in sorted(names):
        path = os.path.join(dirpath, name)
        rel = os.path.relpath(path, root)
        mine = folder_of(rel)
        if mine is not None and mine not in LAYERS:
            problems.append(f"{rel}: folder '{mine}' is not placed in the flow (add it to LAYERS and docs/architecture.md)")
            continue
        with open(path, encoding="utf-8") as f:
            text = f.read()
        if untagged_re.search(text):
            problems.append(f"{rel} opens namespace ppsched without the mode's tag: write "
                            "'namespace ppsched::inline PPSCHED_MODE' (include/ppsched/config.hpp)")
        elif "PPSCHED_MODE" in text and not re.search(r'#\s*include\s*[<"]ppsched/config\.hpp[">]', text) \
                and rel != "config.hpp":
            problems.append(f"{rel} opens the tagged namespace without including <ppsched/config.hpp>")
        for target in include_re.findall(text):
            theirs = folder_of(target)
            if theirs is None:
                if target in FIRST or mine is None:
                    continue
                problems.append(f"{rel} includes the umbrella <ppsched/{target}>")
                continue
            if mine is None or theirs == mine:
                continue
            if theirs not in LAYERS:
                problems.append(f"{rel} includes <ppsched/{target}> from an unplaced folder")
            elif LAYERS.index(theirs) > LAYERS.index(mine):
                problems.append(f"{rel} ({mine}) includes <ppsched/{target}> ({theirs}), which comes later in the flow")

for p in problems:
    print(p)
print(f"{len(problems)} includes against the flow " + " -> ".join(LAYERS))
sys.exit(1 if problems else 0)

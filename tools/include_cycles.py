#!/usr/bin/env python3
"""Finds the file-level include cycles among the library's headers (issue 38, item 4).

Reads every `#include "ppsched/..."` (or <ppsched/...>) of each file under include/ppsched
(headers and impl/*.ipp alike), builds the graph of which file includes which, and prints each
strongly connected component of more than one file: a set of files each of which reaches all
the others through includes. Such a cycle compiles only because some guard opens below an
include, and a reader cannot take the files in any order; a part's types belong in a header
of their own that its detail/ header includes instead of the public one.

Usage: tools/include_cycles.py [SOURCE_ROOT] [--max N] | --self-test
  SOURCE_ROOT  the repository (default: the one this file is in)
  --max N      exit 1 when there are more than N cycles (default 0)
  --self-test  finds the cycles of a small tree it writes, and fails unless they are the ones there
"""
import argparse
import os
import pathlib
import re
import sys

include_re = re.compile(r'^\s*#\s*include\s*[<"](ppsched/[^">]+)[">]', re.M)


def include_graph(include_dir):
    """{file: [files it includes]}, paths relative to include_dir (e.g. 'ppsched/lower/lower.hpp')."""
    graph = {}
    for path in sorted(pathlib.Path(include_dir, "ppsched").rglob("*")):
        if path.is_file() and path.suffix in (".hpp", ".ipp", ".h", ".cuh"):
            text = path.read_text(encoding="utf-8")
            graph[path.relative_to(include_dir).as_posix()] = include_re.findall(text)
    return graph


def cycles(graph):
    """The strongly connected components of more than one file (Tarjan's algorithm, iterative),
    each sorted, in the order of their first file."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in graph:
                    continue  # a file outside the tree (a generated header): no edges of its own
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(graph[child])))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def self_test():
    """A two-file cycle, a three-file one, a file including itself through nothing and a chain: the
    two cycles are found, each once, and nothing else."""
    import tempfile
    files = {
        "a/a.hpp": '#include "ppsched/a/detail/a.hpp"\n',
        "a/detail/a.hpp": '#pragma once\n#include <ppsched/a/a.hpp>\n',
        "b/x.hpp": '#include "ppsched/b/y.hpp"\n#include "ppsched/a/a.hpp"\n',
        "b/y.hpp": '#include "ppsched/b/z.hpp"\n#include "ppsched/generated.hpp"\n',
        "b/z.hpp": '  #  include "ppsched/b/x.hpp"\n',
        "c/chain.hpp": '#include "ppsched/c/end.hpp"\n// #include "ppsched/c/chain.hpp" in a comment is no include\n',
        "c/end.hpp": '#include <vector>\n',
        "c/impl/end.ipp": '#include "ppsched/c/end.hpp"\n',
    }
    with tempfile.TemporaryDirectory() as root:
        for rel, text in files.items():
            path = pathlib.Path(root, "include", "ppsched", rel)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        got = cycles(include_graph(os.path.join(root, "include")))
    expected = [["ppsched/a/a.hpp", "ppsched/a/detail/a.hpp"],
                ["ppsched/b/x.hpp", "ppsched/b/y.hpp", "ppsched/b/z.hpp"]]
    ok = got == expected
    print("self-test:", "passed" if ok else f"failed: expected {expected}, got {got}")
    return 0 if ok else 1


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("source_root", nargs="?", default=str(pathlib.Path(__file__).resolve().parent.parent))
    parser.add_argument("--max", type=int, default=0, help="exit 1 when there are more cycles than this")
    args = parser.parse_args()
    found = cycles(include_graph(os.path.join(args.source_root, "include")))
    for component in found:
        print("cycle: " + " <-> ".join(component))
    print(f"{len(found)} include cycles under include/ppsched (at most {args.max} allowed)")
    return 1 if len(found) > args.max else 0


if __name__ == "__main__":
    sys.exit(main())

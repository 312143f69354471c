#!/usr/bin/env python3
"""Checks that the library's folders form the one-way flow docs/architecture.md describes: a
header may include headers of its own folder and of folders earlier in LAYERS, never of a
later one. A newcomer can then read the folders in this order without jumping back.

Usage: check_layers.py SOURCE_ROOT
Prints each include that goes against the flow and exits 1 if there is any; also fails when a
folder exists that LAYERS does not place, and when a header opens namespace ppsched without the
mode's tag (`namespace ppsched::inline PPSCHED_MODE`, include/ppsched/config.hpp): an untagged
name would be shared by header-only and compiled-mode files again.

Internals sit where the path says so: each part keeps them in its own `detail/` folder
(`<part>/detail/`, or `<part>/<sub>/detail/`), which belongs to its part's layer, so the order
above holds for them too. A header under a `detail/` folder must declare nothing directly in
ppsched (outside `detail`): its names are counted the way tools/count_names.py counts them,
and each public one is reported with the header.

It also refuses the library's internals outside the library: a file under examples/ (the CLI's
examples/cli/ included), a page docs/*.md or README.md that names `ppsched::detail` or
`detail::`, or that includes a header under a `detail/` folder, is reported with its line. What the examples and the docs use is what a user can
use; `detail` may change in any release (docs/architecture.md, "What sits outside the flow").

check_layers.py --self-test runs the checks on small trees it writes and fails unless each
is caught where it is and a clean tree passes.
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

include_re = re.compile(r'^\s*#\s*include\s*[<"]ppsched/([^">]+)[">]', re.M)
untagged_re = re.compile(r'^\s*namespace\s+ppsched\b(?!::inline PPSCHED_MODE\b)', re.M)


def folder_of(rel):
    """The layer a header belongs to; a `detail/` folder belongs to the part that holds it."""
    if rel.startswith("backend/") and rel.count("/") >= 2:
        return "/".join(rel.split("/")[:2])
    if rel in ("backend/cpu.hpp", "backend/mpi.hpp", "backend/cuda.hpp"):  # each backend's umbrella
        return rel[: -len(".hpp")]
    return rel.split("/")[0] if "/" in rel else None  # None: a top-level header


# `detail::x`, `ppsched::detail`, `ppsched::inline header_only::detail`; not `backend_detail`.
internal_re = re.compile(r'\bdetail::|\bppsched::(?:inline\s+\w+::)?detail\b')
# `#include <ppsched/engine/detail/flat_schedule.hpp>`, in code or in a page's code block.
internal_include_re = re.compile(r'#\s*include\s*[<"]ppsched/(?:[^">]*/)?detail/[^">]*[">]')


def public_names(text):
    """The names a header declares directly in ppsched, read as tools/count_names.py reads them."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
    import count_names
    found = {}
    count_names.scan(text, found, "")
    return sorted(found.get("ppsched", {}))


def internals_outside(source_root):
    """`path:line: ...` for each use of the library's internals in the examples and the docs."""
    files = []
    examples = os.path.join(source_root, "examples")
    for dirpath, dirnames, names in os.walk(examples):
        dirnames.sort()
        files += [os.path.join(dirpath, n) for n in sorted(names)]
    docs = os.path.join(source_root, "docs")
    if os.path.isdir(docs):
        files += [os.path.join(docs, n) for n in sorted(os.listdir(docs)) if n.endswith(".md")]
    readme = os.path.join(source_root, "README.md")
    if os.path.isfile(readme):
        files.append(readme)
    found = []
    for path in files:
        try:
            with open(path, encoding="utf-8") as f:
                lines = f.read().splitlines()
        except (UnicodeDecodeError, IsADirectoryError):
            continue  # a binary file (a profile's picture) holds no code
        rel = os.path.relpath(path, source_root)
        for number, line in enumerate(lines, 1):
            m = internal_include_re.search(line) or internal_re.search(line)
            if m:
                found.append(f"{rel}:{number}: uses the library's internals ('{m.group(0)}'): "
                             "use a public name; a helper only the tools need belongs in examples/cli/ under "
                             "its own name; a page names the header that holds an internal instead")
    return found


def layer_problems(source_root):
    root = os.path.join(source_root, "include", "ppsched")
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
            if "detail" in rel.split("/")[:-1]:
                for name in public_names(text):
                    problems.append(f"{rel} is under a detail/ folder but declares '{name}' directly in ppsched: "
                                    "put it in namespace detail, or move it to the part's public header")
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
    return problems


def self_test():
    """Each kind of problem, written into a small tree, is caught with its file and line."""
    import tempfile
    failures = []

    from scratch_tree import write  # the same tree writer as the other checkers' self-tests

    with tempfile.TemporaryDirectory() as root:
        write(root, "include/ppsched/config.hpp", "#pragma once\n")
        write(root, "include/ppsched/graph/a.hpp",
              '#include "ppsched/config.hpp"\nnamespace ppsched::inline PPSCHED_MODE {}\n')
        write(root, "examples/tool.cpp", "int x = ppsched::concat(1);\nint backend_detail = 0;\n")
        write(root, "examples/cli/report.hpp", "// clean\nauto t = detail::number_text(1.0);\n")
        write(root, "docs/guide.md", "Use `ppsched::lower`.\n\nNot `ppsched::detail` (a namespace).\n")
        write(root, "docs/notes.txt", "detail:: outside docs/*.md is not a page\n")
        write(root, "README.md", "in `detail` is fine\nusing namespace ppsched::inline header_only::detail;\n")
        write(root, "examples/peek.cpp", "#include <ppsched/lower/lower.hpp>\n"
              "#include <ppsched/plan/search/detail/run.hpp>\nint detailed = 0;\n")
        write(root, "docs/internals.md", "The table names `engine/detail/flat_schedule.hpp`.\n\n"
              "```cpp\n#include \"ppsched/engine/detail/flat_schedule.hpp\"\n```\n")
        got = internals_outside(root)
        expected = ["examples/cli/report.hpp:2:", "examples/peek.cpp:2:", "docs/guide.md:3:",
                    "docs/internals.md:4:", "README.md:2:"]
        for e in expected:
            if not any(g.startswith(e) for g in got):
                failures.append(f"not caught: {e} (got {got})")
        if len(got) != len(expected):
            failures.append(f"expected {len(expected)} findings, got {got}")
        # A part's detail/ is in its part's layer: it may include earlier parts' detail/ headers.
        write(root, "include/ppsched/graph/detail/a.hpp",
              '#include "ppsched/config.hpp"\nnamespace ppsched::inline PPSCHED_MODE {\n'
              'namespace detail {\nstruct Hidden {};\ninline int helper() { return 1; }\n}  // namespace detail\n}\n')
        write(root, "include/ppsched/plan/search/detail/y.hpp",
              '#include "ppsched/config.hpp"\n#include "ppsched/graph/detail/a.hpp"\n'
              'namespace ppsched::inline PPSCHED_MODE::detail {\nusing Hidden2 = Hidden;\n}\n')
        if layer_problems(root):
            failures.append(f"a clean include tree reported {layer_problems(root)}")
        write(root, "include/ppsched/graph/b.hpp", '#include "ppsched/plan/x.hpp"\n')
        write(root, "include/ppsched/plan/x.hpp", '#include "ppsched/config.hpp"\nnamespace ppsched {}\n')
        write(root, "include/ppsched/graph/detail/c.hpp",
              '#include "ppsched/config.hpp"\n#include "ppsched/plan/search/detail/y.hpp"\n')
        write(root, "include/ppsched/backend/mpi/detail/m.hpp",
              '#include "ppsched/config.hpp"\n#include "ppsched/plan/search/detail/y.hpp"\n')
        write(root, "include/ppsched/backend/cpu/detail/k.hpp",
              '#include "ppsched/config.hpp"\n#include "ppsched/backend/mpi/detail/m.hpp"\n')
        write(root, "include/ppsched/trace/detail/d.hpp",
              '#include "ppsched/config.hpp"\nnamespace ppsched::inline PPSCHED_MODE {\n'
              'namespace detail {\nint fine();\n}\nstruct Exposed {};\ninline int exposed_too() { return 0; }\n}\n')
        got = layer_problems(root)
        if not any("graph/detail/c.hpp (graph)" in g and "later in the flow" in g for g in got):
            failures.append(f"a detail/ header including a later part's detail/ not caught: {got}")
        if not any(g.startswith("backend/cpu/detail/k.hpp (backend/cpu) includes <ppsched/backend/mpi/detail/m.hpp> "
                                "(backend/mpi)") for g in got):
            failures.append(f"a backend's detail/ header including a later backend's not caught: {got}")
        if any(g.startswith("backend/mpi/detail/m.hpp") for g in got):
            failures.append(f"a backend's detail/ header including an earlier part reported: {got}")
        for name in ("Exposed", "exposed_too"):
            if not any("trace/detail/d.hpp is under a detail/ folder" in g and f"'{name}'" in g for g in got):
                failures.append(f"a public name '{name}' in a detail/ header not caught: {got}")
        if any("'fine'" in g or g.startswith(("graph/detail/a.hpp", "plan/search/detail/y.hpp")) for g in got):
            failures.append(f"a clean detail/ header reported: {got}")
        if not any("graph/b.hpp" in g and "later in the flow" in g for g in got):
            failures.append(f"an include against the flow not caught: {got}")
        if not any("plan/x.hpp opens namespace ppsched without the mode's tag" in g for g in got):
            failures.append(f"an untagged namespace not caught: {got}")
    for f in failures:
        print("self-test:", f)
    print("self-test:", "failed" if failures else "passed")
    return 1 if failures else 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    source_root = os.path.abspath(sys.argv[1])
    problems = layer_problems(source_root)
    for p in problems:
        print(p)
    print(f"{len(problems)} includes against the flow " + " -> ".join(LAYERS))
    internal = internals_outside(source_root)
    for p in internal:
        print(p)
    print(f"{len(internal)} uses of the library's internals in examples/, docs/*.md and README.md")
    return 1 if problems or internal else 0


if __name__ == "__main__":
    sys.exit(main())

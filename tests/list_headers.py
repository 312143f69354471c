#!/usr/bin/env python3
"""Prints every header under include/, relative to it, one per line, sorted: the public ones and
the internals in each part's detail/ folder alike, since a detail/ header must compile on its
own as much as a public one (tests/meson.build, headers_alone)."""
import pathlib
import sys

root = pathlib.Path(sys.argv[1])
for path in sorted(root.rglob('*.hpp')):
    print(path.relative_to(root).as_posix())

#!/usr/bin/env python3
"""A header-only and a compiled-mode file in one program (include/ppsched/config.hpp): the two
modes are disjoint libraries, ppsched::v0_1_header_only and ppsched::v0_1_compiled, so mixing them is
either well-defined or a link error, never a silent mix of two definitions of one function.

1. Well-defined: header_only_part.cpp and compiled_part.cpp (+ the ppsched_compiled library)
   do the same work (make_schedule, lower, simulate, a World's steps) and pass only plain
   values across; the program links, each file's calls reach its own mode's definitions (the
   program holds both ppsched::v0_1_header_only::lower and ppsched::v0_1_compiled::lower), and the two
   results agree.
2. Link error: exchange_header_only.cpp defines a function taking a ppsched::Schedule,
   exchange_compiled.cpp calls it from compiled mode; the link must fail, naming
   ppsched::v0_1_compiled::Schedule.

usage: check_mixed_modes.py SOURCE_ROOT COMPILED_LIBRARY WORK_DIR COMPILER [COMPILER ARGS...]
"""
import os
import subprocess
import sys


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def main():
    if len(sys.argv) < 5:
        sys.exit(__doc__)
    root, library, work = (os.path.abspath(a) for a in sys.argv[1:4])
    compiler = sys.argv[4:]
    os.makedirs(work, exist_ok=True)
    src = os.path.join(root, 'tests', 'mixed_modes')
    flags = ['-std=c++20', '-O1', '-I' + os.path.join(root, 'include'), '-pthread']
    failures = []

    def compile_unit(name):
        obj = os.path.join(work, name + '.o')
        p = run(compiler + flags + ['-c', os.path.join(src, name + '.cpp'), '-o', obj])
        if p.returncode != 0:
            sys.exit(f'FAIL: {name}.cpp does not compile:\n{p.stderr[:4000]}')
        return obj

    # 1. Well-defined.
    exe = os.path.join(work, 'mixed')
    objs = [compile_unit('header_only_part'), compile_unit('compiled_part')]
    p = run(compiler + flags + objs + [library, '-o', exe])
    if p.returncode != 0:
        failures.append(f'the mixed program does not link:\n{p.stderr[:4000]}')
    else:
        p = run([exe], timeout=120)
        print(p.stdout, end='')
        if p.returncode != 0:
            failures.append(f'the mixed program exits {p.returncode}: {p.stderr[:2000]}')
        symbols = run(['nm', '-C', exe]).stdout
        for mode in ('v0_1_header_only', 'v0_1_compiled'):
            if f'ppsched::{mode}::lower(' not in symbols:
                failures.append(f'the mixed program holds no ppsched::{mode}::lower: '
                                'one mode\'s calls reached the other\'s code')

    # 2. A link error.
    objs = [compile_unit('exchange_header_only'), compile_unit('exchange_compiled')]
    p = run(compiler + flags + objs + [library, '-o', os.path.join(work, 'exchange')])
    if p.returncode == 0:
        failures.append('a compiled-mode file linked against a header-only function taking '
                        'ppsched::Schedule: the modes share a type undiagnosed')
    elif 'ppsched::v0_1_compiled::Schedule' not in p.stderr:
        failures.append(f'the link failed without naming ppsched::v0_1_compiled::Schedule:\n{p.stderr[:4000]}')
    else:
        print('a ppsched type passed between the modes: link error, as designed')

    for f in failures:
        print('FAIL:', f)
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
